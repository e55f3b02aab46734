"""A SQLite file that the service keeps serving through: WAL, and a file that will not open is
moved aside with a warning and a new one started. The file and its `-wal` / `-shm` are owner-only."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiosqlite

from core.private_files import private_sqlite


async def open_or_set_aside(path: Path, setup: Callable[[aiosqlite.Connection], Awaitable[None]],
                            log: logging.Logger, clock: Callable[[], float] = time.time) -> aiosqlite.Connection:
    """`setup` creates the tables and reads what it keeps in memory; a DatabaseError there too
    means the file is unreadable."""
    private_sqlite(path)
    db = await aiosqlite.connect(path)
    try:
        await _prepare(db, setup)
        return db
    except sqlite3.DatabaseError as exc:
        await db.close()
        aside = path.with_name(f"{path.name}.corrupt-{int(clock())}")
        path.rename(aside)
        for suffix in ("-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        log.warning("file %s was unreadable (%s); moved it to %s and started a new one", path, exc, aside)
    private_sqlite(path)
    db = await aiosqlite.connect(path)
    await _prepare(db, setup)
    return db


async def _prepare(db: aiosqlite.Connection, setup: Callable[[aiosqlite.Connection], Awaitable[None]]) -> None:
    await db.execute("PRAGMA journal_mode=WAL")
    await db.execute("PRAGMA synchronous=NORMAL")
    await setup(db)
    await db.commit()
