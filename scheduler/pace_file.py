"""The learned pace on disk (scheduler/learned_pace.py): one row per engine, model and machine, in one
SQLite file. Written every `_SAVE_EVERY_S` off the request path and at shutdown, so a `kill -9`
loses at most that much learning; read once the engine is up. Rows unused for `_KEPT_S` go, and
only the newest `_KEPT_ROWS` stay: the file stays small whatever runs on the machine."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import platform
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from core.sqlite_file import SqliteFile, schema
from engine.base import Capabilities
from scheduler.learned_pace import LearnedPace

log = logging.getLogger("gpt_oss_webui.queue")

_SCHEMA = ("CREATE TABLE IF NOT EXISTS pace (engine TEXT PRIMARY KEY, saved_at REAL NOT NULL, learned TEXT NOT NULL)",)
_SAVE_EVERY_S = 30.0
_KEPT_S = 30 * 86_400.0  # a month: past it the machine or the engine has likely changed
_KEPT_ROWS = 16


def engine_key(backend: str, caps: Capabilities) -> str:
    """Which engine a learned pace belongs to: the backend, the model, its slots and memory, and the
    machine (its processor and cores). Another of any of these learns afresh."""
    parts = (backend, caps.model, caps.max_num_seqs, caps.token_budget, _processor(), os.cpu_count())
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:32]


def _processor() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class PaceFile:
    def __init__(self, path: str, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._file = SqliteFile(Path(path), "the pace file", log, clock)
        self._engine: str | None = None
        self._learned: Callable[[], LearnedPace] | None = None
        self._saved: LearnedPace | None = None

    async def open(self) -> None:
        await self._file.open(schema(*_SCHEMA))

    async def start(self, engine: str, learned: Callable[[], LearnedPace]) -> LearnedPace | None:
        """From now on `learned` is kept as `engine`'s; returns what was kept for it before."""
        self._engine, self._learned = engine, learned
        return await self.load(engine)

    async def close(self) -> None:
        """The last of what was learned saved, then the file closed."""
        if self._file.is_open:
            try:
                await self._keep_or_warn()
            finally:
                await self._file.close()

    async def keep_forever(self) -> None:
        while True:
            await asyncio.sleep(_SAVE_EVERY_S)
            await self._keep_or_warn()

    async def _keep_or_warn(self) -> None:
        try:
            await self.keep()
        except (OSError, sqlite3.Error) as exc:
            log.warning("writing the learned pace failed (%s); kept in memory for the next try", exc)

    async def keep(self) -> None:
        """Saves what was learned since the last save, if anything."""
        if self._engine is None or self._learned is None:
            return
        pace = self._learned()
        if pace != self._saved:
            await self.save(self._engine, pace)
            self._saved = pace

    async def load(self, engine: str) -> LearnedPace | None:
        """The pace learned for `engine`, if one was kept and reads back whole; a row that does not
        is dropped with a warning."""
        db = self._file.connected()
        query = "SELECT learned FROM pace WHERE engine = ? AND saved_at >= ?"
        async with db.execute(query, (engine, self.clock() - _KEPT_S)) as cur:
            row = await cur.fetchone()
        if row is None:
            return None
        try:
            return LearnedPace.model_validate_json(row[0])
        except ValidationError as exc:
            log.warning(
                "the pace kept for this engine did not read back (%d errors); learning afresh", exc.error_count()
            )
            async with self._file.transaction() as db:
                await db.execute("DELETE FROM pace WHERE engine = ?", (engine,))
            return None

    async def save(self, engine: str, pace: LearnedPace) -> None:
        now = self.clock()
        async with self._file.transaction() as db:
            await db.execute(
                "INSERT INTO pace (engine, saved_at, learned) VALUES (?, ?, ?) "
                "ON CONFLICT (engine) DO UPDATE SET saved_at = excluded.saved_at, learned = excluded.learned",
                (engine, now, pace.model_dump_json()),
            )
            await db.execute("DELETE FROM pace WHERE saved_at < ?", (now - _KEPT_S,))
            await db.execute(
                "DELETE FROM pace WHERE engine NOT IN (SELECT engine FROM pace ORDER BY saved_at DESC LIMIT ?)",
                (_KEPT_ROWS,),
            )
