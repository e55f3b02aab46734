"""What the page's conversation history holds: a conversation, its messages, a summary for the
sidebar, and a conversation read from a file before it is stored. Plain data, no storage: the store
(conversations/store.py) writes and reads them, the page (ui/history/) shows and exports them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STREAMING, INTERRUPTED = "streaming", "interrupted"
ROLES = ("user", "assistant")
OUTCOMES = ("", "done", "stopped", "refused", "failed", STREAMING, INTERRUPTED)
TITLE_CHARS = 80


class ImportProblem(ValueError):
    """Why an import was refused, as a message key and its values: the page words it in the
    reader's language, and Python's own text never reaches the user."""

    def __init__(self, code: str, **values: object) -> None:
        super().__init__(code, values)
        self.code = code
        self.values = values


@dataclass(slots=True)
class StoredMessage:
    """One turn. `outcome` is empty for a user's message; for an answer: done, stopped, refused,
    failed, streaming (being written now) or interrupted (the server stopped during it)."""

    role: str
    content: str
    reasoning: str = ""
    details: dict[str, Any] = field(default_factory=dict)  # class, wait_s, tokens, tokens_per_s, cached, caller
    outcome: str = ""
    reason: str = ""
    created: float = 0.0
    id: int | None = None


@dataclass(slots=True)
class Imported:
    """A conversation read from a file and checked (ui.history.imports), not stored yet."""

    title: str
    settings: dict[str, Any]
    messages: list[StoredMessage]
    created: float | None = None


@dataclass(slots=True)
class Summary:
    id: str
    title: str
    created: float
    updated: float


@dataclass(slots=True)
class Conversation:
    id: str
    title: str
    created: float
    updated: float
    settings: dict[str, Any]
    messages: list[StoredMessage]


def title_from(text: str) -> str:
    """The first line of the first message, shortened: what the sidebar shows until renamed."""
    line = " ".join(text.split())
    return (line[: TITLE_CHARS - 1] + "…") if len(line) > TITLE_CHARS else (line or "…")
