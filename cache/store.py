"""The response cache: one SQLite file (WAL) through aiosqlite, with an in-memory index.

The index (key -> created, size, in least-recently-used order) answers misses without touching the
database and decides evictions; the database holds the canonical request and the answer. Every
write goes through one background writer task, so a response never waits on a write and the
single connection never meets "database is locked".
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite

from cache.keys import CacheKey
from cache.similar import Pairing, SimilarAnswers
from cache.similar_index import Match
from core.sqlite_file import SqliteFile
from settings.schema import CacheConfig

log = logging.getLogger("gpt_oss_webui.cache")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY,
    canonical TEXT NOT NULL,
    response TEXT NOT NULL,
    size INTEGER NOT NULL,
    created REAL NOT NULL,
    last_used REAL NOT NULL
)
"""
_INSERT = "INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?, ?)"
_BLOCKS = """
CREATE TABLE IF NOT EXISTS similar_blocks (
    source TEXT NOT NULL,
    request TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (source, request)
)
"""


@dataclass(slots=True)
class CachedResponse:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    reasoning: str = ""  # entries written before reasoning was stored have none
    reasoning_tokens: int = 0
    tool_calls: list[dict] = field(default_factory=list)  # {"id", "name", "arguments"}
    stop_sequence: str | None = None  # entries written before it was stored have none


@dataclass(slots=True)
class _Indexed:
    created: float
    size: int


class ResponseCache:
    def __init__(
        self, config: CacheConfig, clock: Callable[[], float] = time.time, similar: SimilarAnswers | None = None
    ) -> None:
        self.config = config
        self.clock = clock
        self.similar = similar  # kept in step with the entries below: added, dropped, rebuilt at open
        self._file = SqliteFile(Path(config.path), "the response cache", log, clock)
        self._index: OrderedDict[str, _Indexed] = OrderedDict()
        self._bytes = 0
        self._pending: dict[str, tuple[str, str]] = {}  # key -> (canonical, response) not yet written
        self._writes: asyncio.Queue = asyncio.Queue()
        self._tasks: list[asyncio.Task] = []
        self.hits = self.misses = self.evictions = self.expired = 0

    async def open(self) -> None:
        await self._file.open(self._setup)
        self._tasks = [
            asyncio.create_task(self._write_forever(), name="cache-writer"),
            asyncio.create_task(self._purge_forever(), name="cache-purge"),
        ]

    async def close(self) -> None:
        if not self._file.is_open:
            return
        await self.flush()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._file.close()

    async def get(self, key: CacheKey) -> CachedResponse | None:
        entry = self._index.get(key.digest)
        if entry is None or not self._file.is_open:
            self.misses += 1
            return None
        now = self.clock()
        if now - entry.created > self.config.ttl_s:
            self._drop(key.digest)
            self.expired += 1
            self.misses += 1
            return None
        row = await self._row(key.digest)
        if row is None or row[0] != key.canonical:  # a hash collision never returns another request's answer
            self.misses += 1
            return None
        self._index.move_to_end(key.digest)
        self._writes.put_nowait(("UPDATE entries SET last_used = ? WHERE key = ?", (now, key.digest)))
        self.hits += 1
        return CachedResponse(**json.loads(row[1]))

    async def get_similar(self, key: CacheKey) -> tuple[CachedResponse, Match] | None:
        """After an exact miss: the answer to the most similar stored request (same partition, every
        guard passed, not blocked), counted as a similar hit rather than a miss."""
        if self.similar is None or not self._file.is_open:
            return None
        match = self.similar.find(key)
        if match is None:
            return None
        entry = self._index.get(match.digest)
        if entry is None or self.clock() - entry.created > self.config.ttl_s:
            return None
        row = await self._row(match.digest)
        if row is None:
            return None
        self._index.move_to_end(match.digest)
        self.misses -= 1
        self.similar.hits += 1
        return CachedResponse(**json.loads(row[1])), match

    def block(self, pairing: Pairing) -> bool:
        """Never serve `pairing.source`'s answer to `pairing.request` again (kept in the file)."""
        if self.similar is None or not self.similar.block(pairing):
            return False
        self._writes.put_nowait(
            ("INSERT OR IGNORE INTO similar_blocks VALUES (?, ?, ?)", (pairing.source, pairing.request, self.clock()))
        )
        return True

    async def _row(self, digest: str) -> tuple[str, str] | None:
        row = self._pending.get(digest)  # a put still queued for the writer is already an answer
        if row is not None:
            return row
        try:
            async with self._file.connected().execute(
                "SELECT canonical, response FROM entries WHERE key = ?", (digest,)
            ) as cur:
                found = await cur.fetchone()
        except sqlite3.Error as exc:
            log.warning("cache read failed: %s", exc)
            return None
        return None if found is None else (found[0], found[1])

    def put(self, key: CacheKey, response: CachedResponse) -> None:
        """Store an answer; returns at once, the write happens in the background."""
        if not self._file.is_open:
            return
        body = json.dumps(asdict(response), ensure_ascii=False)
        size = len(key.canonical.encode()) + len(body.encode())
        if size > self.config.max_bytes:
            return
        now = self.clock()
        self._drop(key.digest, delete=False)
        self._index[key.digest] = _Indexed(now, size)
        self._bytes += size
        self._pending[key.digest] = (key.canonical, body)
        self._writes.put_nowait((_INSERT, (key.digest, key.canonical, body, size, now, now)))
        if self.similar is not None:
            self.similar.added(key.digest, key.canonical)
        self._evict()

    async def clear(self) -> int:
        removed = len(self._index)
        self._index.clear()
        self._bytes = 0
        if self.similar is not None:
            self.similar.rebuild(())
        self._writes.put_nowait(("DELETE FROM entries", ()))
        await self.flush()
        return removed

    def shared_hit(self) -> None:
        """A lookup that missed was answered by an identical request in flight: count it as a hit."""
        self.misses -= 1
        self.hits += 1

    async def flush(self) -> None:
        await self._writes.join()

    def stats(self) -> dict[str, Any]:
        similar_hits = self.similar.hits if self.similar is not None else 0
        lookups = self.hits + self.misses + similar_hits
        stats = {
            "object": "cache.stats",
            "enabled": self._file.is_open,
            "entries": len(self._index),
            "bytes": self._bytes,
            "hits": self.hits,
            "misses": self.misses,
            "hit_rate": round(self.hits / lookups, 4) if lookups else 0.0,
            "evictions": self.evictions,
            "expired": self.expired,
            "max_entries": self.config.max_entries,
            "max_bytes": self.config.max_bytes,
            "ttl_s": self.config.ttl_s,
        }
        if self.similar is not None:  # similar hits apart: neither `hits` nor `misses` counts them
            stats["similar"] = {
                **self.similar.stats(),
                "hit_rate": round(similar_hits / lookups, 4) if lookups else 0.0,
            }
        return stats

    def purge_expired(self) -> int:
        cutoff = self.clock() - self.config.ttl_s
        old = [k for k, e in self._index.items() if e.created < cutoff]
        for digest in old:
            self._drop(digest, delete=False)
        if old:
            self._writes.put_nowait(("DELETE FROM entries WHERE created < ?", (cutoff,)))
        self.expired += len(old)
        return len(old)

    def _evict(self) -> None:
        while len(self._index) > self.config.max_entries or self._bytes > self.config.max_bytes:
            digest = next(iter(self._index))
            self._drop(digest)
            self.evictions += 1

    def _drop(self, digest: str, delete: bool = True) -> None:
        entry = self._index.pop(digest, None)
        if entry is not None:
            self._bytes -= entry.size
            if self.similar is not None:
                self.similar.dropped(digest)
            if delete:
                self._writes.put_nowait(("DELETE FROM entries WHERE key = ?", (digest,)))

    async def _setup(self, db: aiosqlite.Connection) -> None:
        await db.execute(_SCHEMA)
        await db.execute(_BLOCKS)
        await self._load_index(db)
        if self.similar is not None:
            await self._load_similar(db, self.similar)

    async def _load_index(self, db: aiosqlite.Connection) -> None:
        self._index.clear()
        self._bytes = 0
        async with db.execute("SELECT key, created, size FROM entries ORDER BY last_used") as cur:
            async for digest, created, size in cur:
                self._index[digest] = _Indexed(created, size)
                self._bytes += size
        self._evict()

    async def _load_similar(self, db: aiosqlite.Connection, similar: SimilarAnswers) -> None:
        """The similar index is rebuilt from the stored canonical requests (it survives restarts
        without a file of its own), in least-recently-used order like the entries."""
        async with db.execute("SELECT key, canonical FROM entries ORDER BY last_used") as cur:
            rows = [(digest, canonical) async for digest, canonical in cur if digest in self._index]
        similar.rebuild(rows)
        async with db.execute("SELECT source, request FROM similar_blocks") as cur:
            similar.load_blocks([tuple(row) async for row in cur])

    async def _write_forever(self) -> None:
        while True:
            batch = [await self._writes.get()]
            while not self._writes.empty() and len(batch) < 256:
                batch.append(self._writes.get_nowait())
            try:
                async with self._file.transaction() as db:  # a batch that fails is rolled back whole
                    for sql, params in batch:
                        await db.execute(sql, params)
            except sqlite3.Error as exc:
                log.warning("cache write failed: %s", exc)
            finally:
                for sql, params in batch:
                    if sql == _INSERT and self._pending.get(params[0]) == (params[1], params[2]):
                        del self._pending[params[0]]
                    self._writes.task_done()

    async def _purge_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.purge_interval_s)
            self.purge_expired()
