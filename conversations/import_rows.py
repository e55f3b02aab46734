"""An import's rows and checks: whether a file's conversations fit beside what their owner keeps
(by count; its bytes are checked once written, by SQLite's own count), and the rows to insert."""

from __future__ import annotations

import json
from collections.abc import Sequence

import aiosqlite

from conversations.records import INTERRUPTED, STREAMING, Imported, ImportProblem, title_from
from core.sqlite_file import scalar
from settings.schema import HistoryConfig


async def room_for(db: aiosqlite.Connection, owner: str, items: Sequence[Imported], config: HistoryConfig) -> None:
    """An ImportProblem where the import does not fit beside what the owner keeps."""
    limit, longest = config.max_conversations, config.max_messages
    if len(items) > limit:
        raise ImportProblem("too_many_conversations", n=len(items), limit=limit)
    for n, item in enumerate(items, 1):
        if len(item.messages) > longest:
            raise ImportProblem("too_many_messages", conversation=n, n=len(item.messages), limit=longest)
    held = await scalar(db, "SELECT count(*) FROM conversations WHERE owner = ?", (owner,))
    if held + len(items) > limit:
        raise ImportProblem("would_drop", n=held + len(items) - limit, limit=limit)


def rows(owner: str, pairs: list[tuple[str, Imported]], now: float) -> tuple[list[tuple], list[tuple]]:
    """The conversations' rows and their messages' rows, for an import."""
    conversations: list[tuple] = []
    messages: list[tuple] = []
    for conversation_id, item in reversed(pairs):  # the file's first conversation ends up at the top
        created = item.created or now
        conversations.append((conversation_id, owner, title_from(item.title), created, now, json.dumps(item.settings)))
        messages += [
            (
                conversation_id,
                m.role,
                m.content,
                m.reasoning,
                json.dumps(m.details),
                INTERRUPTED if m.outcome == STREAMING else m.outcome,
                m.reason,
                m.created or created,
            )
            for m in item.messages
        ]
    return conversations, messages


def readable(size: int) -> str:
    """Bytes as people read them: 70.4 KiB, 256.0 MiB."""
    if size < 1024:
        return f"{size} bytes"
    scaled = float(size)
    for unit in ("KiB", "MiB", "GiB"):
        scaled /= 1024
        if scaled < 1024 or unit == "GiB":
            break
    return f"{scaled:.1f} {unit}"
