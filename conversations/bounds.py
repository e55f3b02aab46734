"""The history's bounds in bytes: per owner (`max_bytes`) and over every owner (`max_total_bytes`).

Counts alone left it unbounded: a thousand conversations of a thousand messages of up to a
million characters each, and on an open server an owner per browser id, which any client may
make up. So each conversation carries its size in bytes (its messages' text, reasoning, reason
and details, its title and settings, and a fixed cost per row, so empty ones count too), kept by
triggers in the same transaction as every write, and one row holds the total. SQLite keeps them
exact through rollbacks and `kill -9`; the total is counted afresh at every open all the same.

Past an owner's bound its least recently used conversations go first, then the oldest messages of
the one being written. Past the total, the owners holding the most lose their least recently used
conversations, each down to one level, until the total is a tenth under the bound: the scan of
every owner runs once per tenth of the bound written, not at every write, and whoever holds the
most loses first (a flood from one made-up browser id pushes out its own history)."""

from __future__ import annotations

from collections.abc import Collection

import aiosqlite

_CONVERSATION_ROW = 256  # what a conversation costs beyond its title and settings
_MESSAGE_ROW = 64
_TOTAL_AFTER = 0.9


def _text(*columns: str) -> str:
    return " + ".join(f"length(CAST({c} AS BLOB))" for c in columns)


def _message(row: str) -> str:
    return f"({_text(*(f'{row}.{c}' for c in ('content', 'reasoning', 'details', 'reason')))} + {_MESSAGE_ROW})"


def _own(row: str) -> str:
    return f"({_text(f'{row}.title', f'{row}.settings')} + {_CONVERSATION_ROW})"


TRIGGERS = (
    f"""CREATE TRIGGER IF NOT EXISTS message_added AFTER INSERT ON messages BEGIN
        UPDATE conversations SET bytes = bytes + {_message("NEW")} WHERE id = NEW.conversation_id; END""",
    f"""CREATE TRIGGER IF NOT EXISTS message_changed AFTER UPDATE ON messages BEGIN
        UPDATE conversations SET bytes = bytes + {_message("NEW")} - {_message("OLD")}
        WHERE id = NEW.conversation_id; END""",
    f"""CREATE TRIGGER IF NOT EXISTS message_removed AFTER DELETE ON messages BEGIN
        UPDATE conversations SET bytes = bytes - {_message("OLD")} WHERE id = OLD.conversation_id; END""",
    f"""CREATE TRIGGER IF NOT EXISTS conversation_added AFTER INSERT ON conversations BEGIN
        UPDATE history_total SET bytes = bytes + NEW.bytes;
        UPDATE conversations SET bytes = bytes + {_own("NEW")} WHERE id = NEW.id; END""",
    f"""CREATE TRIGGER IF NOT EXISTS conversation_renamed AFTER UPDATE OF title, settings ON conversations BEGIN
        UPDATE conversations SET bytes = bytes + {_own("NEW")} - {_own("OLD")} WHERE id = NEW.id; END""",
    """CREATE TRIGGER IF NOT EXISTS conversation_resized AFTER UPDATE OF bytes ON conversations BEGIN
        UPDATE history_total SET bytes = bytes + NEW.bytes - OLD.bytes; END""",
    """CREATE TRIGGER IF NOT EXISTS conversation_removed AFTER DELETE ON conversations BEGIN
        UPDATE history_total SET bytes = bytes - OLD.bytes; END""",
)


async def count_sizes(db: aiosqlite.Connection) -> None:
    """The size column on a file written before it (filled in), the triggers, the total counted."""
    async with db.execute("PRAGMA table_info(conversations)") as cursor:
        columns = {row[1] async for row in cursor}
    await db.execute("CREATE TABLE IF NOT EXISTS history_total (id INTEGER PRIMARY KEY CHECK (id = 0), bytes INTEGER)")
    await db.execute("INSERT OR IGNORE INTO history_total VALUES (0, 0)")
    if "bytes" not in columns:
        await db.execute("ALTER TABLE conversations ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0")
        await db.execute(
            f"UPDATE conversations SET bytes = {_own('conversations')} + COALESCE((SELECT SUM({_message('m')}) "
            "FROM messages m WHERE m.conversation_id = conversations.id), 0)"
        )
    for trigger in TRIGGERS:
        await db.execute(trigger)


async def recount_total(db: aiosqlite.Connection) -> None:
    await db.execute("UPDATE history_total SET bytes = (SELECT COALESCE(SUM(bytes), 0) FROM conversations)")


async def owner_bytes(db: aiosqlite.Connection, owner: str) -> int:
    return await _one(db, "SELECT COALESCE(SUM(bytes), 0) FROM conversations WHERE owner = ?", (owner,))


async def total_bytes(db: aiosqlite.Connection) -> int:
    return await _one(db, "SELECT bytes FROM history_total WHERE id = 0", ())


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
    """Within `limit` over every owner, down to a tenth under it: the owners holding the most lose
    their least recently used conversations, each down to one level (the most first, then the
    next once they hold as much); never one in `writing`."""
    total = await total_bytes(db)
    if total <= limit:
        return
    async with db.execute("SELECT owner, SUM(bytes) FROM conversations GROUP BY owner ORDER BY 2 DESC") as cursor:
        held = [(owner, int(size)) async for owner, size in cursor]
    level = water_level([size for _, size in held], total - int(limit * _TOTAL_AFTER))
    for owner, size in held:
        if size <= level:
            break
        async with db.execute(
            "SELECT id, bytes FROM conversations WHERE owner = ? ORDER BY updated, rowid", (owner,)
        ) as cursor:
            older = [(row[0], row[1]) async for row in cursor if row[0] not in writing]
        await _drop(db, older, size - int(level))


def water_level(held: list[int], over: int) -> float:
    """The size every holder above it is cut down to so that `over` bytes go in all (`held`
    largest first)."""
    above = 0
    for n, size in enumerate(held):
        above += size
        following = held[n + 1] if n + 1 < len(held) else 0
        if above - (n + 1) * following >= over:
            return max(0.0, (above - over) / (n + 1))
    return 0.0


async def _drop(db: aiosqlite.Connection, conversations: list[tuple[str, int]], over: int) -> int:
    """Deletes conversations in order until `over` bytes went; returns what is still over."""
    for conversation_id, size in conversations:
        if over <= 0:
            break
        await db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
        await db.execute("DELETE FROM messages WHERE conversation_id = ?", (conversation_id,))
        over -= size
    return over


async def _one(db: aiosqlite.Connection, sql: str, args: tuple) -> int:
    async with db.execute(sql, args) as cursor:
        row = await cursor.fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0
