"""The history's bounds in bytes: per owner (`max_bytes`) and over every owner (`max_total_bytes`).

Counts alone left it unbounded: a thousand conversations of a thousand messages of up to a
million characters each, and on an open server an owner per browser id, which any client may
make up. So each conversation carries its size in bytes (its messages' text, reasoning, reason
and details, its title and settings, and a fixed cost per row, so empty ones count too), kept by
triggers in the same transaction as every write, and one row holds the total. SQLite keeps them
exact through rollbacks and `kill -9`; the total is counted afresh at every open all the same.

Past an owner's bound its least recently used conversations go first, then the oldest messages of
the one being written. Past the total, the least recently used go, whoever's, until the total is a
tenth under the bound: read off an index and deleted in batches, so a write's work is what it
pushes out, however many owners there are (a balance across owners scanned them all, 23 s for
20,000 made-up browser ids). The owner's bound keeps any one owner to `max_bytes`; on an open
server many made-up ids can still push out others' oldest conversations, so a server whose
history matters has keys."""

from __future__ import annotations

from collections.abc import Collection

import aiosqlite

from core.sqlite_file import scalar

_CONVERSATION_ROW = 256  # what a conversation costs beyond its title and settings
_MESSAGE_ROW = 64
_TOTAL_AFTER = 0.9
_BATCH = 500  # ids in one DELETE (SQLite takes up to 32,766 variables)
_COUNTED = 1  # PRAGMA user_version once sizes are kept: a later count raises it and counts again


def _text(*columns: str) -> str:
    return " + ".join(f"length(CAST({c} AS BLOB))" for c in columns)


def _message(row: str) -> str:
    return f"({_text(*(f'{row}.{c}' for c in ('content', 'reasoning', 'details', 'reason')))} + {_MESSAGE_ROW})"


def _own(row: str) -> str:
    return f"({_text(f'{row}.title', f'{row}.settings')} + {_CONVERSATION_ROW})"


TRIGGERS = (
    f"""CREATE TRIGGER message_added AFTER INSERT ON messages BEGIN
        UPDATE conversations SET bytes = bytes + {_message("NEW")} WHERE id = NEW.conversation_id; END""",
    f"""CREATE TRIGGER message_changed AFTER UPDATE ON messages BEGIN
        UPDATE conversations SET bytes = bytes + {_message("NEW")} - {_message("OLD")}
        WHERE id = NEW.conversation_id; END""",
    f"""CREATE TRIGGER message_removed AFTER DELETE ON messages BEGIN
        UPDATE conversations SET bytes = bytes - {_message("OLD")} WHERE id = OLD.conversation_id; END""",
    f"""CREATE TRIGGER conversation_added AFTER INSERT ON conversations BEGIN
        UPDATE history_total SET bytes = bytes + NEW.bytes;
        UPDATE conversations SET bytes = bytes + {_own("NEW")} WHERE id = NEW.id; END""",
    f"""CREATE TRIGGER conversation_renamed AFTER UPDATE OF title, settings ON conversations BEGIN
        UPDATE conversations SET bytes = bytes + {_own("NEW")} - {_own("OLD")} WHERE id = NEW.id; END""",
    """CREATE TRIGGER conversation_resized AFTER UPDATE OF bytes ON conversations BEGIN
        UPDATE history_total SET bytes = bytes + NEW.bytes - OLD.bytes; END""",
    """CREATE TRIGGER conversation_removed AFTER DELETE ON conversations BEGIN
        UPDATE history_total SET bytes = bytes - OLD.bytes; END""",
)


async def count_sizes(db: aiosqlite.Connection) -> None:
    """The size column and the triggers; on a file from before them (or counted by another
    formula: `user_version`), every conversation counted afresh."""
    async with db.execute("PRAGMA user_version") as cursor:
        row = await cursor.fetchone()
    await db.execute("CREATE TABLE IF NOT EXISTS history_total (id INTEGER PRIMARY KEY CHECK (id = 0), bytes INTEGER)")
    await db.execute("INSERT OR IGNORE INTO history_total VALUES (0, 0)")
    await db.execute("CREATE INDEX IF NOT EXISTS conversations_by_use ON conversations (updated)")
    if row is not None and row[0] >= _COUNTED:
        return
    async with db.execute("PRAGMA table_info(conversations)") as cursor:
        if "bytes" not in {row[1] async for row in cursor}:
            await db.execute("ALTER TABLE conversations ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0")
    for trigger in TRIGGERS:
        await db.execute(f"DROP TRIGGER IF EXISTS {trigger.split()[2]}")
        await db.execute(trigger)
    await db.execute(
        f"UPDATE conversations SET bytes = {_own('conversations')} + COALESCE((SELECT SUM({_message('m')}) "
        "FROM messages m WHERE m.conversation_id = conversations.id), 0)"
    )
    await db.execute(f"PRAGMA user_version = {_COUNTED}")


async def recount_total(db: aiosqlite.Connection) -> None:
    await db.execute("UPDATE history_total SET bytes = (SELECT COALESCE(SUM(bytes), 0) FROM conversations)")


async def owner_bytes(db: aiosqlite.Connection, owner: str) -> int:
    return await scalar(db, "SELECT COALESCE(SUM(bytes), 0) FROM conversations WHERE owner = ?", (owner,))


async def total_bytes(db: aiosqlite.Connection) -> int:
    return await scalar(db, "SELECT bytes FROM history_total WHERE id = 0", ())


async def bound_owner(db: aiosqlite.Connection, owner: str, writing: str, limit: int) -> None:
    """Within `limit`: the owner's least recently used conversations go, then the oldest messages
    of `writing` (its newest message stays, however large)."""
    over = await owner_bytes(db, owner) - limit
    if over <= 0:
        return
    async with db.execute(
        "SELECT id, bytes FROM conversations WHERE owner = ? AND id != ? ORDER BY updated, rowid",
        (owner, writing),
    ) as cursor:
        older = [(row[0], row[1]) async for row in cursor]
    over = await _drop(db, older, over)
    if over <= 0:
        return
    async with db.execute(
        f"SELECT id, {_message('messages')} FROM messages WHERE conversation_id = ? ORDER BY id", (writing,)
    ) as cursor:
        messages = [row async for row in cursor][:-1]
    for message_id, size in messages:
        if over <= 0:
            return
        await db.execute("DELETE FROM messages WHERE id = ?", (message_id,))
        over -= size


async def bound_total(db: aiosqlite.Connection, limit: int, writing: Collection[str]) -> None:
    """Within `limit` over every owner: the least recently used conversations go, whoever's, until
    the total is a tenth under it; never one in `writing`. Read oldest first off an index and
    deleted in batches, so the work is what goes, however many owners there are."""
    over = await total_bytes(db) - int(limit * _TOTAL_AFTER)
    if over <= limit * (1 - _TOTAL_AFTER):
        return
    doomed: list[str] = []
    async with db.execute("SELECT id, bytes FROM conversations ORDER BY updated, rowid") as cursor:
        async for conversation_id, size in cursor:
            if conversation_id in writing:
                continue
            doomed.append(conversation_id)
            over -= size
            if over <= 0:
                break
    for start in range(0, len(doomed), _BATCH):
        batch = doomed[start : start + _BATCH]
        marks = ", ".join("?" * len(batch))
        await db.execute(f"DELETE FROM conversations WHERE id IN ({marks})", batch)
        await db.execute(f"DELETE FROM messages WHERE conversation_id IN ({marks})", batch)


async def _drop(db: aiosqlite.Connection, conversations: list[tuple[str, int]], over: int) -> int:
    """Deletes conversations in order until `over` bytes went; returns what is still over."""
    for conversation_id, size in conversations:
        if over <= 0:
            break
        await db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
        await db.execute("DELETE FROM messages WHERE conversation_id = ?", (conversation_id,))
        over -= size
    return over
