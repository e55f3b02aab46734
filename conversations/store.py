"""The page's conversations, kept on the server: one SQLite file (WAL) through aiosqlite.

Every read and write names its owner (the signed-in caller, or an anonymous browser) next to the
conversation's id, and a conversation of another owner does not exist for it: that, not the
page, is what keeps one user's conversations from another. Each message is committed when it is
written, so a `kill -9` loses at most the unsaved tail of an answer still streaming; an answer
that was streaming when the server died is marked `interrupted` when the file is next opened.
Bounded per owner (`max_conversations` and `max_bytes`, least recently used first), per
conversation (`max_messages`, oldest first) and over every owner (`max_total_bytes`): see
conversations/bounds.py. An import, written whole in one transaction or not at all, is refused
where it would pass its owner's bounds rather than push out the owner's own conversations (the
total's bound may still take anyone's least recently used). No Gradio here: the page (ui/) uses
the store, as the other transports could, and it sits beside the other stores."""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import sqlite3
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from conversations import bounds
from conversations.import_rows import readable, room_for, rows
from conversations.records import (
    INTERRUPTED,
    STREAMING,
    Conversation,
    Imported,
    ImportProblem,
    StoredMessage,
    Summary,
    title_from,
)
from core.sqlite_file import SqliteFile
from settings.schema import HistoryConfig

log = logging.getLogger("gpt_oss_webui.history")

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS conversations (
        id TEXT PRIMARY KEY, owner TEXT NOT NULL, title TEXT NOT NULL, created REAL NOT NULL,
        updated REAL NOT NULL, settings TEXT NOT NULL, bytes INTEGER NOT NULL DEFAULT 0)""",
    "CREATE INDEX IF NOT EXISTS conversations_by_owner ON conversations (owner, updated)",
    """CREATE TABLE IF NOT EXISTS messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id TEXT NOT NULL, role TEXT NOT NULL,
        content TEXT NOT NULL, reasoning TEXT NOT NULL, details TEXT NOT NULL, outcome TEXT NOT NULL,
        reason TEXT NOT NULL, created REAL NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages (conversation_id, id)",
)
_INSERT_CONVERSATION = (
    "INSERT INTO conversations (id, owner, title, created, updated, settings) VALUES (?, ?, ?, ?, ?, ?)"
)
_INSERT_MESSAGE = (
    "INSERT INTO messages (conversation_id, role, content, reasoning, details, outcome, reason, "
    "created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


class HistoryStore:
    def __init__(self, config: HistoryConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self._file = SqliteFile(Path(config.path), "conversation history", log, clock)

    @property
    def available(self) -> bool:
        """Off by configuration, or a file that could not be opened at all: the page chats on."""
        return self._file.is_open

    async def open(self) -> None:
        if not self.config.enabled:
            return
        try:
            await self._file.open(self._setup)
        except (OSError, sqlite3.Error) as exc:
            log.error("conversation history is off: %s could not be opened (%s)", self.config.path, exc)

    async def close(self) -> None:
        await self._file.close()

    async def _setup(self, db: aiosqlite.Connection) -> None:
        for statement in _SCHEMA:
            await db.execute(statement)
        await bounds.count_sizes(db)
        await db.execute(
            "UPDATE messages SET outcome = ?, reason = ? WHERE outcome = ?",
            (INTERRUPTED, "the server stopped during this answer", STREAMING),
        )
        await bounds.recount_total(db)

    async def create(self, owner: str, title: str, settings: dict[str, Any], created: float | None = None) -> str:
        conversation_id = uuid.uuid4().hex
        now = self.clock() if created is None else created
        async with self._file.transaction() as db:
            await db.execute(
                _INSERT_CONVERSATION,
                (conversation_id, owner, title_from(title), now, now, json.dumps(settings)),
            )
            await self._bound_conversations(db, owner)
            await self._bound_bytes(db, owner, conversation_id)
        return conversation_id

    async def list(self, owner: str, query: str = "", limit: int | None = None) -> list[Summary]:
        """Newest first; `query` matches titles and message text, case-insensitively."""
        if not self._file.is_open:
            return []
        sql = "SELECT id, title, created, updated FROM conversations WHERE owner = ?"
        args: builtins.list[str | int] = [owner]
        if query.strip():
            like = "%" + query.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            sql += (
                " AND (title LIKE ? ESCAPE '\\' OR EXISTS (SELECT 1 FROM messages m WHERE "
                "m.conversation_id = conversations.id AND m.content LIKE ? ESCAPE '\\'))"
            )
            args += [like, like]
        sql += " ORDER BY updated DESC, rowid DESC LIMIT ?"
        args.append(limit or self.config.max_conversations)
        async with self._file.connected().execute(sql, args) as cursor:
            return [Summary(*row) async for row in cursor]

    async def get(self, owner: str, conversation_id: str) -> Conversation | None:
        if not self._file.is_open:
            return None
        db = self._file.connected()
        async with db.execute(
            "SELECT id, title, created, updated, settings FROM conversations WHERE id = ? AND owner = ?",
            (conversation_id, owner),
        ) as cursor:
            row = await cursor.fetchone()
        if row is None:
            return None
        async with db.execute(
            "SELECT role, content, reasoning, details, outcome, reason, created, id "
            "FROM messages WHERE conversation_id = ? ORDER BY id",
            (row[0],),
        ) as cursor:
            messages = [StoredMessage(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5], r[6], r[7]) async for r in cursor]
        return Conversation(row[0], row[1], row[2], row[3], json.loads(row[4]), messages)

    async def rename(self, owner: str, conversation_id: str, title: str) -> bool:
        if not title.strip():
            return False
        return await self._change(
            owner, conversation_id, "UPDATE conversations SET title = ?", " ".join(title.split())[:200]
        )

    async def save_settings(self, owner: str, conversation_id: str, settings: dict[str, Any]) -> bool:
        return await self._change(owner, conversation_id, "UPDATE conversations SET settings = ?", json.dumps(settings))

    async def delete(self, owner: str, conversation_id: str) -> bool:
        if not self._file.is_open:
            return False
        async with self._file.transaction() as db:
            cursor = await db.execute("DELETE FROM conversations WHERE id = ? AND owner = ?", (conversation_id, owner))
            if cursor.rowcount:
                await db.execute("DELETE FROM messages WHERE conversation_id = ?", (conversation_id,))
            return cursor.rowcount > 0

    async def add(self, owner: str, conversation_id: str, message: StoredMessage) -> int | None:
        """The new message's id, committed; None where the conversation is not this owner's."""
        if not self._file.is_open:
            return None
        async with self._file.transaction() as db:
            if not await self._owns(db, owner, conversation_id):
                return None
            created = message.created or self.clock()
            cursor = await db.execute(
                _INSERT_MESSAGE,
                (
                    conversation_id,
                    message.role,
                    message.content,
                    message.reasoning,
                    json.dumps(message.details),
                    message.outcome,
                    message.reason,
                    created,
                ),
            )
            await self._touch(db, conversation_id, created)
            await db.execute(
                "DELETE FROM messages WHERE conversation_id = ? AND id NOT IN (SELECT id FROM messages "
                "WHERE conversation_id = ? ORDER BY id DESC LIMIT ?)",
                (conversation_id, conversation_id, self.config.max_messages),
            )
            await self._bound_bytes(db, owner, conversation_id)
            return cursor.lastrowid

    async def update(self, owner: str, conversation_id: str, message_id: int, message: StoredMessage) -> bool:
        """An answer as it grows and when it ends, committed each time."""
        if not self._file.is_open:
            return False
        async with self._file.transaction() as db:
            if not await self._owns(db, owner, conversation_id):
                return False
            cursor = await db.execute(
                "UPDATE messages SET content = ?, reasoning = ?, details = ?, outcome = ?, reason = ? "
                "WHERE id = ? AND conversation_id = ?",
                (
                    message.content,
                    message.reasoning,
                    json.dumps(message.details),
                    message.outcome,
                    message.reason,
                    message_id,
                    conversation_id,
                ),
            )
            await self._touch(db, conversation_id, self.clock())
            await self._bound_bytes(db, owner, conversation_id)
            return cursor.rowcount > 0

    async def truncate(self, owner: str, conversation_id: str, keep: int) -> bool:
        """Keeps the first `keep` messages: an edited message and a regenerated answer replace
        every later turn."""
        if not self._file.is_open:
            return False
        async with self._file.transaction() as db:
            if not await self._owns(db, owner, conversation_id):
                return False
            await db.execute(
                "DELETE FROM messages WHERE conversation_id = ? AND id NOT IN (SELECT id FROM messages "
                "WHERE conversation_id = ? ORDER BY id LIMIT ?)",
                (conversation_id, conversation_id, keep),
            )
            return True

    async def import_conversations(self, owner: str, items: Sequence[Imported]) -> builtins.list[str]:
        """A file's conversations in one transaction: all of them, or on any error none, rolled
        back before the lock is let go so that no later write commits half an import. The bound
        evicts nothing for an import: one that would push out earlier conversations is refused."""
        ids = [uuid.uuid4().hex for _ in items]
        async with self._file.transaction() as db:  # rolled back on any error, a cancelled import too
            await room_for(db, owner, items, self.config)
            await self._insert(db, owner, list(zip(ids, items)))
            held, limit = await bounds.owner_bytes(db, owner), self.config.max_bytes
            if held > limit:
                raise ImportProblem("too_large", held=readable(held), limit=readable(limit))
            await bounds.bound_total(db, self.config.max_total_bytes, ids)
        return ids

    async def import_conversation(
        self,
        owner: str,
        title: str,
        settings: dict[str, Any],
        messages: builtins.list[StoredMessage],
        created: float | None = None,
    ) -> str:
        """One conversation, as import_conversations writes a file's (bench/history.py fills with it)."""
        (conversation_id,) = await self.import_conversations(owner, [Imported(title, settings, messages, created)])
        return conversation_id

    async def _change(self, owner: str, conversation_id: str, update: str, value: str) -> bool:
        """One column of one of the owner's conversations (`update` sets it to `value`)."""
        if not self._file.is_open:
            return False
        async with self._file.transaction() as db:
            cursor = await db.execute(update + " WHERE id = ? AND owner = ?", (value, conversation_id, owner))
            await self._bound_bytes(db, owner, conversation_id)
            return cursor.rowcount > 0

    async def _bound_bytes(self, db: aiosqlite.Connection, owner: str, writing: str) -> None:
        await bounds.bound_owner(db, owner, writing, self.config.max_bytes)
        await bounds.bound_total(db, self.config.max_total_bytes, (writing,))

    @staticmethod
    async def _owns(db: aiosqlite.Connection, owner: str, conversation_id: str) -> bool:
        async with db.execute(
            "SELECT 1 FROM conversations WHERE id = ? AND owner = ?", (conversation_id, owner)
        ) as cursor:
            return await cursor.fetchone() is not None

    @staticmethod
    async def _touch(db: aiosqlite.Connection, conversation_id: str, when: float) -> None:
        await db.execute("UPDATE conversations SET updated = MAX(updated, ?) WHERE id = ?", (when, conversation_id))

    async def _bound_conversations(self, db: aiosqlite.Connection, owner: str) -> None:
        async with db.execute(
            "SELECT id FROM conversations WHERE owner = ? ORDER BY updated DESC, rowid DESC LIMIT -1 OFFSET ?",
            (owner, self.config.max_conversations),
        ) as cursor:
            old = [row[0] async for row in cursor]
        for conversation_id in old:
            await db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
            await db.execute("DELETE FROM messages WHERE conversation_id = ?", (conversation_id,))

    async def _insert(self, db: aiosqlite.Connection, owner: str, pairs: builtins.list[tuple[str, Imported]]) -> None:
        """Every row built first, in a thread (an import file of 50 MiB is a million messages; a value
        JSON cannot hold fails before any write), then two inserts."""
        conversations, messages = await asyncio.to_thread(rows, owner, pairs, self.clock())
        await db.executemany(_INSERT_CONVERSATION, conversations)
        await db.executemany(_INSERT_MESSAGE, messages)
