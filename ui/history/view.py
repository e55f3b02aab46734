"""Stored conversations as the chatbot shows them, and back: which chat row is which stored
message. No Gradio and no database here.

The chat holds more rows than the store: a Thinking block before an answer, and, for an answer
restored from the history, a folded "Details" row after it. Both are titled messages, which the
model is never sent (ui.chat.call) and which count for nothing here."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from conversations.store import Conversation, StoredMessage, Summary
from ui.chat.call import ChatSettings
from ui.chat.views import details_text
from ui.i18n import message

SETTING_NAMES = ("system_prompt", "priority", "max_tokens", "temperature", "top_p", "reasoning_effort", "timeout_s")


def is_extra(row: dict) -> bool:
    """A Thinking block or a Details row: shown, never stored as a message of its own."""
    return bool((row.get("metadata") or {}).get("title"))


def stored_count(chat: list[dict]) -> int:
    """How many stored messages the rows before a point stand for (where an edit cuts)."""
    return sum(1 for row in chat if not is_extra(row))


def chat_rows(conversation: Conversation, code: str) -> list[dict]:
    """The chatbot's rows for a stored conversation, each answer with its Thinking and Details."""
    rows: list[dict] = []
    for m in conversation.messages:
        if m.role != "assistant":
            rows.append({"role": "user", "content": m.content})
            continue
        if m.reasoning:
            rows.append({"role": "assistant", "content": m.reasoning,
                         "metadata": {"title": message(code, "thinking"), "status": "done"}})
        rows.append({"role": "assistant", "content": m.content})
        if (line := outcome_line(m, code)):
            rows.append({"role": "assistant", "content": line,
                         "metadata": {"title": message(code, "details"), "log": line, "status": "done"}})
    return rows


def outcome_line(m: StoredMessage, code: str) -> str:
    """The answer's details, and why it ended if it did not end on its own."""
    parts = [details_text(m.details, code)] if m.details.get("caller") else []
    if m.outcome not in ("", "done"):
        parts.append(message(code, "outcome_" + m.outcome) + (f": {m.reason}" if m.reason else ""))
    return " · ".join(parts)


def last_info(conversation: Conversation, code: str) -> str:
    """The line under the chat after opening: the last answer's, as it was when it was given."""
    answers = [m for m in conversation.messages if m.role == "assistant"]
    return outcome_line(answers[-1], code) if answers else ""


def settings_dict(settings: ChatSettings) -> dict[str, Any]:
    return asdict(settings)


def settings_values(saved: dict[str, Any], default: ChatSettings) -> list[Any]:
    """The page's settings fields in SETTING_NAMES order, from a conversation's saved settings
    (a field it did not save keeps the page's default)."""
    base, out = asdict(default), []
    for name in SETTING_NAMES:
        value, wanted = saved.get(name, base[name]), base[name]
        if isinstance(wanted, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        out.append(value if type(value) is type(wanted) else wanted)
    return out


def choices(summaries: list[Summary]) -> list[tuple[str, str]]:
    """The sidebar's (label, id) pairs, newest first as listed."""
    return [(s.title, s.id) for s in summaries]
