"""A SQLite file that the service keeps serving through: WAL, and a file that will not open is
moved aside with a warning and a new one started. The file and its `-wal` / `-shm` are owner-only.

Every store keeps its file the same way (SqliteFile): one aiosqlite connection, one change of
several statements at a time on it, a clear error where it is used before it is open, and each
change committed whole or rolled back, so a failed or cancelled change never rides along with the
next one's commit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiosqlite

from core.private_files import private_sqlite

Setup = Callable[[aiosqlite.Connection], Awaitable[None]]


def schema(*statements: str) -> Setup:
    """A setup that runs these statements (CREATE ... IF NOT EXISTS) on a file just opened."""

    async def setup(db: aiosqlite.Connection) -> None:
        for statement in statements:
            await db.execute(statement)

    return setup


async def scalar(db: aiosqlite.Connection, sql: str, args: tuple = ()) -> int:
    """The first column of the query's first row as an integer; 0 where there is none (or NULL)."""
    async with db.execute(sql, args) as cursor:
        row = await cursor.fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


class SqliteFile:
    """One store's file and its connection; `what` names the store in the error when it is not open."""

    def __init__(self, path: Path, what: str, log: logging.Logger, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.what = what
        self.log = log
        self.clock = clock
        self._db: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()  # one change of several statements at a time on the one connection

    @property
    def is_open(self) -> bool:
        return self._db is not None

    async def open(self, setup: Setup) -> aiosqlite.Connection:
        """The connection, set aside and started afresh where the file is unreadable; on any other
        error (a folder that cannot be made) it raises and stays closed."""
        self._db = await open_or_set_aside(self.path, setup, self.log, self.clock)
        return self._db

    async def close(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            await db.close()

    def connected(self) -> aiosqlite.Connection:
        if self._db is None:
            raise RuntimeError(f"{self.what} is not open")
        return self._db

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """The connection for one change, under the lock: committed when the block ends, rolled
        back on any exception, cancellation included, before the lock is let go."""
        async with self._lock:
            db = self.connected()
            try:
                yield db
                await db.commit()
            except BaseException:
                await _roll_back(db, self.log)
                raise


async def _roll_back(db: aiosqlite.Connection, log: logging.Logger) -> None:
    """A rollback that fails too (the connection closed under it) is logged: the error that
    ended the change is the one raised."""
    try:
        await db.rollback()
    except (sqlite3.Error, ValueError) as exc:
        log.warning("a rollback failed after a failed change: %s", exc)


async def open_or_set_aside(
    path: Path, setup: Setup, log: logging.Logger, clock: Callable[[], float] = time.time
) -> aiosqlite.Connection:
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


async def _prepare(db: aiosqlite.Connection, setup: Setup) -> None:
    await db.execute("PRAGMA journal_mode=WAL")
    await db.execute("PRAGMA synchronous=NORMAL")
    await setup(db)
    await db.commit()
