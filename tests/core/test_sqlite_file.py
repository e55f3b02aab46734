"""The helper every SQLite store keeps its file through: a change commits whole or not at all
(an error or a cancellation rolls it back before the next change can commit it), one change at a
time, and a clear error where the file is used before it is open or after it is closed."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiosqlite
import pytest

from core.sqlite_file import SqliteFile

log = logging.getLogger("gpt_oss_webui.test")


async def make_table(db: aiosqlite.Connection) -> None:
    await db.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")


async def opened(tmp_path: Path) -> SqliteFile:
    file = SqliteFile(tmp_path / "t.sqlite3", "the test store", log)
    await file.open(make_table)
    return file


async def rows(file: SqliteFile) -> list[int]:
    async with file.connected().execute("SELECT x FROM t ORDER BY x") as cursor:
        return [row[0] async for row in cursor]


async def test_a_change_commits_when_its_block_ends(tmp_path):
    file = await opened(tmp_path)
    async with file.transaction() as db:
        await db.execute("INSERT INTO t VALUES (1)")
    await file.close()
    again = await opened(tmp_path)
    assert await rows(again) == [1]
    await again.close()


async def test_an_error_rolls_the_change_back_and_is_raised(tmp_path):
    file = await opened(tmp_path)
    with pytest.raises(ZeroDivisionError):
        async with file.transaction() as db:
            await db.execute("INSERT INTO t VALUES (1)")
            raise ZeroDivisionError
    async with file.transaction() as db:
        await db.execute("INSERT INTO t VALUES (2)")
    assert await rows(file) == [2]  # the first change did not ride along with the second's commit
    await file.close()


async def test_a_cancelled_change_is_rolled_back(tmp_path):
    file = await opened(tmp_path)
    inside = asyncio.Event()

    async def slow_change() -> None:
        async with file.transaction() as db:
            await db.execute("INSERT INTO t VALUES (1)")
            inside.set()
            await asyncio.sleep(60)

    task = asyncio.create_task(slow_change())
    await inside.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with file.transaction() as db:
        await db.execute("INSERT INTO t VALUES (2)")
    assert await rows(file) == [2]
    await file.close()


async def test_changes_take_turns(tmp_path):
    file = await opened(tmp_path)
    order: list[str] = []

    async def change(name: str) -> None:
        async with file.transaction():
            order.append(f"{name} in")
            await asyncio.sleep(0.01)
            order.append(f"{name} out")

    await asyncio.gather(change("a"), change("b"))
    assert order == ["a in", "a out", "b in", "b out"]
    await file.close()


async def test_a_file_not_open_says_which_store(tmp_path):
    file = SqliteFile(tmp_path / "t.sqlite3", "the test store", log)
    assert not file.is_open
    with pytest.raises(RuntimeError, match="^the test store is not open$"):
        file.connected()
    file = await opened(tmp_path)
    await file.close()
    await file.close()  # twice is harmless
    with pytest.raises(RuntimeError, match="is not open"):
        async with file.transaction():
            pass
