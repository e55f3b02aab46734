"""Stored responses for `previous_response_id` and `GET /v1/responses/{id}`: one SQLite file
through aiosqlite. A response is written, and the write committed, before its client is told it
completed, so a `kill -9` loses nothing acknowledged. Each response keeps only its own input and
output items and its predecessor's id; a continuation walks the chain. Bounded by age (`ttl_s`),
by count (`max_responses`, oldest first; `max_per_caller`, a caller's own oldest first) and by
bytes (`max_bytes`, `max_bytes_per_caller`, likewise): a count alone let one key keep ten
thousand responses of a mebibyte each. Each caller's bytes are kept by SQLite triggers in the
transaction of every write (`held`), so they survive a `kill -9` exact. Every read is by
(id, caller): another caller's response does not exist for it."""

from __future__ import annotations

import abc
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiosqlite

from core.sqlite_file import SqliteFile, scalar

log = logging.getLogger("gpt_oss_webui.responses")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    caller TEXT NOT NULL,
    created REAL NOT NULL,
    previous_id TEXT,
    response TEXT NOT NULL,
    input_items TEXT NOT NULL
)
"""
_BY_AGE = "CREATE INDEX IF NOT EXISTS responses_by_age ON responses (created)"
_BY_CALLER = "CREATE INDEX IF NOT EXISTS responses_by_caller ON responses (caller, created)"
_SIZE = "(length(CAST({0}.response AS BLOB)) + length(CAST({0}.input_items AS BLOB)) + 128)"
_HELD = "CREATE TABLE IF NOT EXISTS held (caller TEXT PRIMARY KEY, bytes INTEGER NOT NULL)"
_TRIGGERS = (
    f"""CREATE TRIGGER IF NOT EXISTS response_added AFTER INSERT ON responses BEGIN
        INSERT OR IGNORE INTO held VALUES (NEW.caller, 0);
        UPDATE held SET bytes = bytes + {_SIZE.format("NEW")} WHERE caller = NEW.caller; END""",
    f"""CREATE TRIGGER IF NOT EXISTS response_changed AFTER UPDATE ON responses BEGIN
        UPDATE held SET bytes = bytes - {_SIZE.format("OLD")} WHERE caller = OLD.caller;
        INSERT OR IGNORE INTO held VALUES (NEW.caller, 0);
        UPDATE held SET bytes = bytes + {_SIZE.format("NEW")} WHERE caller = NEW.caller; END""",
    f"""CREATE TRIGGER IF NOT EXISTS response_removed AFTER DELETE ON responses BEGIN
        UPDATE held SET bytes = bytes - {_SIZE.format("OLD")} WHERE caller = OLD.caller; END""",
)
MAX_CHAIN = 10_000
PURGE_INTERVAL_S = 3600.0


@dataclass(slots=True)
class StoredResponse:
    id: str
    caller: str
    created: float
    previous_id: str | None
    response: dict
    input_items: list[dict]


class ChainBroken(LookupError):
    """A response in the chain is gone (deleted, expired or evicted)."""


UNFINISHED = ("queued", "in_progress")


def failed_by_a_stop(response: dict) -> dict:
    return {
        **response,
        "status": "failed",
        "error": {
            "code": "server_error",
            "message": "the server stopped before this background response finished; send it again",
        },
    }


class ChainedStore(abc.ABC):
    """What both stores (SQLite, Redis) offer; a chain is read back through `get`."""

    @abc.abstractmethod
    async def open(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def put(self, stored: StoredResponse) -> None: ...

    @abc.abstractmethod
    async def update(self, response_id: str, caller: str, response: dict) -> None: ...

    @abc.abstractmethod
    async def delete(self, response_id: str, caller: str) -> bool: ...

    @abc.abstractmethod
    async def get(self, response_id: str, caller: str) -> StoredResponse | None: ...

    async def history(self, response_id: str, caller: str) -> list[dict]:
        """Every item of the chain ending in `response_id`, oldest first: each response's input
        items, then its output."""
        chain: list[StoredResponse] = []
        next_id: str | None = response_id
        while next_id is not None and len(chain) < MAX_CHAIN:
            stored = await self.get(next_id, caller)
            if stored is None:
                if not chain:
                    raise KeyError(response_id)
                raise ChainBroken(next_id)
            chain.append(stored)
            next_id = stored.previous_id
        return [item for stored in reversed(chain) for item in (*stored.input_items, *stored.response["output"])]


class ResponseStore(ChainedStore):
    def __init__(
        self,
        path: str,
        ttl_s: float,
        max_responses: int,
        clock: Callable[[], float] = time.time,
        max_per_caller: int | None = None,
        max_bytes: int | None = None,
        max_bytes_per_caller: int | None = None,
    ) -> None:
        self.path, self.ttl_s, self.max_responses, self.clock = Path(path), ttl_s, max_responses, clock
        self.max_per_caller = max_per_caller or max_responses
        self.max_bytes = max_bytes
        self.max_bytes_per_caller = max_bytes_per_caller or max_bytes
        self._file = SqliteFile(self.path, "the response store", log, clock)
        self._count = 0
        self._purged = 0.0

    async def open(self) -> None:
        await self._file.open(self._setup)
        await self._purge()
        await self._fail_unfinished()

    async def _fail_unfinished(self) -> None:
        """Background responses the last process did not finish: failed, never silently lost."""
        async with self._file.transaction() as db:
            async with db.execute(
                "SELECT id, response FROM responses WHERE json_extract(response, '$.status') "
                "IN ('queued', 'in_progress')"
            ) as cur:
                rows = list(await cur.fetchall())
            for response_id, text in rows:
                await db.execute(
                    "UPDATE responses SET response = ? WHERE id = ?",
                    (json.dumps(failed_by_a_stop(json.loads(text))), response_id),
                )
        if rows:
            log.warning("%d background responses were unfinished when the server stopped; marked failed", len(rows))

    async def _setup(self, db: aiosqlite.Connection) -> None:
        await db.execute(_SCHEMA)
        await db.execute(_BY_AGE)
        await db.execute(_BY_CALLER)
        async with db.execute("SELECT 1 FROM sqlite_master WHERE name = 'held'") as cur:
            counted = await cur.fetchone() is not None
        await db.execute(_HELD)
        if not counted:  # a file from before the bytes were kept: counted once
            await db.execute(
                f"INSERT INTO held SELECT caller, SUM({_SIZE.format('responses')}) FROM responses GROUP BY caller"
            )
        for trigger in _TRIGGERS:
            await db.execute(trigger)
        async with db.execute("SELECT COUNT(*) FROM responses") as cur:
            row = await cur.fetchone()
        self._count = row[0] if row is not None else 0  # COUNT(*) always has its row

    async def close(self) -> None:
        await self._file.close()

    async def put(self, stored: StoredResponse) -> None:
        async with self._file.transaction() as db:
            # a DELETE, not INSERT OR REPLACE: a REPLACE fires no delete trigger, and `held` would drift
            replaced = await db.execute("DELETE FROM responses WHERE id = ?", (stored.id,))
            cur = await db.execute(
                "INSERT INTO responses VALUES (?, ?, ?, ?, ?, ?)",
                (
                    stored.id,
                    stored.caller,
                    stored.created,
                    stored.previous_id,
                    json.dumps(stored.response, ensure_ascii=False),
                    json.dumps(stored.input_items, ensure_ascii=False),
                ),
            )
            self._count += cur.rowcount - replaced.rowcount
            self._count -= await self._evict_own(db, stored.caller)
            self._count -= await self._evict_bytes(db, stored.caller, stored.id)
        if self._count > self.max_responses:
            await self._evict(self._count - self.max_responses)
        if self.clock() - self._purged > PURGE_INTERVAL_S:
            await self._purge()

    async def update(self, response_id: str, caller: str, response: dict) -> None:
        """A background response's new state (in progress, then its outcome)."""
        async with self._file.transaction() as db:
            await db.execute(
                "UPDATE responses SET response = ? WHERE id = ? AND caller = ?",
                (json.dumps(response, ensure_ascii=False), response_id, caller),
            )
            self._count -= await self._evict_bytes(db, caller, response_id)

    async def get(self, response_id: str, caller: str) -> StoredResponse | None:
        async with self._file.connected().execute(
            "SELECT id, caller, created, previous_id, response, input_items FROM responses "
            "WHERE id = ? AND caller = ? AND created >= ?",
            (response_id, caller, self.clock() - self.ttl_s),
        ) as cur:
            row = await cur.fetchone()
        if row is None:
            return None
        return StoredResponse(row[0], row[1], row[2], row[3], json.loads(row[4]), json.loads(row[5]))

    async def delete(self, response_id: str, caller: str) -> bool:
        async with self._file.transaction() as db:
            cur = await db.execute("DELETE FROM responses WHERE id = ? AND caller = ?", (response_id, caller))
        self._count -= cur.rowcount
        return cur.rowcount > 0

    async def _purge(self) -> None:
        self._purged = self.clock()
        async with self._file.transaction() as db:
            cur = await db.execute("DELETE FROM responses WHERE created < ?", (self.clock() - self.ttl_s,))
        self._count -= cur.rowcount
        if self._count > self.max_responses:
            await self._evict(self._count - self.max_responses)

    async def _evict_own(self, db: aiosqlite.Connection, caller: str) -> int:
        """The caller's own oldest past `max_per_caller`; how many went."""
        cur = await db.execute(
            "DELETE FROM responses WHERE id IN (SELECT id FROM responses WHERE caller = ? "
            "ORDER BY created DESC LIMIT -1 OFFSET ?)",
            (caller, self.max_per_caller),
        )
        return cur.rowcount

    async def _evict_bytes(self, db: aiosqlite.Connection, caller: str, keep: str) -> int:
        """The caller's own oldest past `max_bytes_per_caller`, then anyone's oldest past `max_bytes`,
        never `keep` (the response just written); how many went."""
        gone = 0
        if self.max_bytes_per_caller is not None:
            held = await scalar(db, "SELECT bytes FROM held WHERE caller = ?", (caller,))
            gone += await _drop_oldest(db, held - self.max_bytes_per_caller, keep, caller)
        if self.max_bytes is not None:
            total = await scalar(db, "SELECT SUM(bytes) FROM held", ())
            gone += await _drop_oldest(db, total - self.max_bytes, keep)
        return gone

    async def _evict(self, n: int) -> None:
        async with self._file.transaction() as db:
            cur = await db.execute(
                "DELETE FROM responses WHERE id IN (SELECT id FROM responses ORDER BY created LIMIT ?)", (n,)
            )
        self._count -= cur.rowcount


async def _drop_oldest(db: aiosqlite.Connection, over: int, keep: str, caller: str | None = None) -> int:
    """Deletes the oldest responses (of `caller`, or anyone's) until `over` bytes went; how many."""
    if over <= 0:
        return 0
    mine = "caller = ? AND " if caller is not None else ""
    args = (caller, keep) if caller is not None else (keep,)
    async with db.execute(
        f"SELECT id, {_SIZE.format('responses')} FROM responses WHERE {mine}id != ? ORDER BY created", args
    ) as cur:
        oldest: list[str] = []
        async for response_id, size in cur:
            oldest.append(response_id)
            over -= size
            if over <= 0:
                break
    for response_id in oldest:
        await db.execute("DELETE FROM responses WHERE id = ?", (response_id,))
    return len(oldest)
