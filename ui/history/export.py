"""Conversations out and in: our JSON (which imports back whole), Markdown (for reading), and
ChatGPT's `conversations.json` (its data export), so a user can bring earlier chats along. Reading
an import, field by field, is ui.history.imports's. No Gradio and no database here."""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import asdict
from typing import Any

from conversations.records import Conversation, Imported, ImportProblem, StoredMessage
from ui.history.imports import FORMAT, LATEST, parse_import

__all__ = ["FORMAT", "VERSION", "Imported", "ImportProblem", "file_stem", "parse_import", "to_json", "to_markdown"]
VERSION = 1


def to_json(conversations: list[Conversation], clock: float | None = None) -> str:
    body = {
        "format": FORMAT,
        "version": VERSION,
        "exported": clock if clock is not None else time.time(),
        "conversations": [
            {
                "title": c.title,
                "created": c.created,
                "updated": c.updated,
                "settings": c.settings,
                "messages": [_message_dict(m) for m in c.messages],
            }
            for c in conversations
        ],
    }
    return json.dumps(body, ensure_ascii=False, indent=1)


def to_markdown(conversations: list[Conversation]) -> str:
    return "\n\n---\n\n".join(_one_markdown(c) for c in conversations) + "\n"


def file_stem(conversations: list[Conversation], everything: bool) -> str:
    """A file name a person recognises: the title for one, a date for all."""
    if everything or len(conversations) != 1:
        return "conversations-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    slug = re.sub(r"[^\w-]+", "-", conversations[0].title, flags=re.UNICODE).strip("-")[:60]
    return slug or "conversation"


def _message_dict(message: StoredMessage) -> dict[str, Any]:
    out = asdict(message)
    out.pop("id")
    return out


def _one_markdown(c: Conversation) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(c.created if _real_time(c.created) else 0))
    lines = [f"# {c.title}", "", f"_{stamp}_"]
    if system := str(c.settings.get("system_prompt") or "").strip():
        lines += ["", f"**System prompt:** {system}"]
    for m in c.messages:
        lines += ["", "### " + ("You" if m.role == "user" else "Assistant"), ""]
        if m.reasoning:
            lines += ["<details><summary>Thinking</summary>", "", m.reasoning, "", "</details>", ""]
        lines.append(m.content)
        if m.outcome not in ("", "done"):
            lines += ["", f"_({m.outcome}{': ' + m.reason if m.reason else ''})_"]
    return "\n".join(lines)


def _real_time(value: float) -> bool:
    """A time gmtime can write: one stored before imports were checked may be inf or far off."""
    return math.isfinite(value) and 0 <= value <= LATEST
