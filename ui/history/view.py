"""Stored conversations as the chatbot shows them, and back: which chat row is which stored
message. No Gradio and no database here.

The chat holds more rows than the store: a Thinking block before an answer, and, for an answer
restored from the history, a folded "Details" row after it. Both are titled messages, which the
model is never sent (ui.chat.call) and which count for nothing here (ui.chat.views.is_extra)."""

from __future__ import annotations

from conversations.records import Conversation, StoredMessage, Summary
from ui.chat.views import details_text
from ui.i18n import message


def chat_rows(conversation: Conversation, code: str) -> list[dict]:
    """The chatbot's rows for a stored conversation, each answer with its Thinking and Details."""
    rows: list[dict] = []
    for m in conversation.messages:
        if m.role != "assistant":
            rows.append({"role": "user", "content": m.content})
            continue
        if m.reasoning:
            rows.append(
                {
                    "role": "assistant",
                    "content": m.reasoning,
                    "metadata": {"title": message(code, "thinking"), "status": "done"},
                }
            )
        rows.append({"role": "assistant", "content": m.content})
        if line := outcome_line(m, code):
            rows.append(
                {
                    "role": "assistant",
                    "content": line,
                    "metadata": {"title": message(code, "details"), "log": line, "status": "done"},
                }
            )
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


def choices(summaries: list[Summary]) -> list[tuple[str, str]]:
    """The sidebar's (label, id) pairs, newest first as listed."""
    return [(s.title, s.id) for s in summaries]
