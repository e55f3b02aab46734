"""Conversations out and in: our JSON (which imports back whole), Markdown (for reading), and
ChatGPT's `conversations.json` (its data export), so a user can bring earlier chats along.
No Gradio and no database here."""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from typing import Any

from ui.history_store import Conversation, StoredMessage

FORMAT = "gpt-oss-webui.conversations"
VERSION = 1
_ROLES = ("user", "assistant")


class ImportProblem(ValueError):
    """The file is not one of the formats we read; the message says what was wrong."""


@dataclass(slots=True)
class Imported:
    title: str
    settings: dict[str, Any]
    messages: list[StoredMessage]
    created: float | None = None


def to_json(conversations: list[Conversation], clock: float | None = None) -> str:
    body = {"format": FORMAT, "version": VERSION, "exported": clock if clock is not None else time.time(),
            "conversations": [{"title": c.title, "created": c.created, "updated": c.updated, "settings": c.settings,
                               "messages": [_message_dict(m) for m in c.messages]} for c in conversations]}
    return json.dumps(body, ensure_ascii=False, indent=1)


def to_markdown(conversations: list[Conversation]) -> str:
    return "\n\n---\n\n".join(_one_markdown(c) for c in conversations) + "\n"


def file_stem(conversations: list[Conversation], everything: bool) -> str:
    """A file name a person recognises: the title for one, a date for all."""
    if everything or len(conversations) != 1:
        return "conversations-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    slug = re.sub(r"[^\w-]+", "-", conversations[0].title, flags=re.UNICODE).strip("-")[:60]
    return slug or "conversation"


def parse_import(data: bytes) -> list[Imported]:
    """Ours, or ChatGPT's export; anything else is an ImportProblem."""
    try:
        body = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ImportProblem(f"not a JSON file ({exc})") from exc
    if isinstance(body, dict) and body.get("format") == FORMAT:
        return [_ours(c) for c in _list(body.get("conversations"), "conversations")]
    if isinstance(body, list) and all(isinstance(c, dict) and "mapping" in c for c in body):
        return [c for c in (_chatgpt(c) for c in body) if c.messages]
    raise ImportProblem("neither this page's export nor ChatGPT's conversations.json")


def _message_dict(message: StoredMessage) -> dict[str, Any]:
    out = asdict(message)
    out.pop("id")
    return out


def _one_markdown(c: Conversation) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(c.created))
    lines = [f"# {c.title}", "", f"_{stamp}_"]
    if (system := str(c.settings.get("system_prompt") or "").strip()):
        lines += ["", f"**System prompt:** {system}"]
    for m in c.messages:
        lines += ["", "### " + ("You" if m.role == "user" else "Assistant"), ""]
        if m.reasoning:
            lines += ["<details><summary>Thinking</summary>", "", m.reasoning, "", "</details>", ""]
        lines.append(m.content)
        if m.outcome not in ("", "done"):
            lines += ["", f"_({m.outcome}{': ' + m.reason if m.reason else ''})_"]
    return "\n".join(lines)


def _list(value: Any, what: str) -> list:
    if not isinstance(value, list):
        raise ImportProblem(f"{what} should be a list")
    return value


def _ours(c: Any) -> Imported:
    if not isinstance(c, dict):
        raise ImportProblem("each conversation should be an object")
    messages = []
    for m in _list(c.get("messages"), "messages"):
        if not isinstance(m, dict) or m.get("role") not in _ROLES or not isinstance(m.get("content"), str):
            raise ImportProblem("each message needs a role (user or assistant) and a text content")
        messages.append(StoredMessage(m["role"], m["content"], str(m.get("reasoning") or ""),
                                      m["details"] if isinstance(m.get("details"), dict) else {},
                                      str(m.get("outcome") or ""), str(m.get("reason") or ""),
                                      _number(m.get("created"))))
    settings = c.get("settings") if isinstance(c.get("settings"), dict) else {}
    first = next((m.content for m in messages if m.role == "user"), "")
    return Imported(str(c.get("title") or first or "imported"), settings, messages, _number(c.get("created")) or None)


def _chatgpt(c: dict) -> Imported:
    """The branch ChatGPT shows (current_node back to the root), its text messages only."""
    mapping = c.get("mapping") if isinstance(c.get("mapping"), dict) else {}
    node_id = c.get("current_node")
    if node_id not in mapping:  # no current node: the last leaf
        node_id = next((k for k, v in reversed(list(mapping.items())) if not (v or {}).get("children")), None)
    chain: list[dict] = []
    seen: set[str] = set()
    while node_id in mapping and node_id not in seen:
        seen.add(node_id)
        node = mapping[node_id] or {}
        chain.append(node)
        node_id = node.get("parent")
    messages = []
    for node in reversed(chain):
        message = node.get("message") or {}
        role = (message.get("author") or {}).get("role")
        content = message.get("content") or {}
        parts = content.get("parts") if content.get("content_type") in ("text", "multimodal_text") else None
        text = "".join(p for p in parts or [] if isinstance(p, str)).strip()
        if role in _ROLES and text:
            messages.append(StoredMessage(role, text, outcome="done" if role == "assistant" else "",
                                          created=_number(message.get("create_time"))))
    title = str(c.get("title") or (messages[0].content if messages else "imported"))
    return Imported(title, {}, messages, _number(c.get("create_time")) or None)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0
