"""Files, batches and each batch line's result in one SQLite file (through aiosqlite), so a batch
and the file it reads are changed in one transaction. A line's result is committed when it
finishes: after a `kill -9` the lines answered stay answered and the rest run again, none twice in
the output. Every read is by (id, caller): another caller's file or batch does not exist for it.
Bounded per caller, so no caller's uploads push out another's: files by count and bytes
(refused past them), batches by count (the caller's own oldest finished go, their files with
them); and by age, where no file an unfinished batch reads goes."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import aiosqlite

from core.sqlite_file import SqliteFile, schema

log = logging.getLogger("gpt_oss_webui.batches")

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS files (id TEXT PRIMARY KEY, caller TEXT NOT NULL, purpose TEXT NOT NULL,
       filename TEXT NOT NULL, bytes INTEGER NOT NULL, created REAL NOT NULL, content BLOB NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS files_by_caller ON files (caller, created)",
    """CREATE TABLE IF NOT EXISTS batches (id TEXT PRIMARY KEY, caller TEXT NOT NULL, namespace TEXT NOT NULL,
       created REAL NOT NULL, status TEXT NOT NULL, batch TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS batches_by_caller ON batches (caller, created)",
    """CREATE TABLE IF NOT EXISTS lines (batch_id TEXT NOT NULL, line INTEGER NOT NULL, custom_id TEXT NOT NULL,
       body TEXT NOT NULL, state TEXT NOT NULL, result TEXT, PRIMARY KEY (batch_id, line))""",
    "CREATE INDEX IF NOT EXISTS lines_by_state ON lines (batch_id, state, line)",
    "CREATE INDEX IF NOT EXISTS lines_to_run ON lines (batch_id, state)",  # by rowid: the order they were stored
)
UNFINISHED = ("validating", "in_progress", "finalizing", "cancelling")
PENDING, DONE, FAILED = "pending", "done", "failed"  # a line's states: an answer goes to output, a failure to errors


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}" if prefix == "file" else f"{prefix}_{uuid.uuid4().hex}"


@dataclass(slots=True)
class StoredFile:
    id: str
    caller: str
    purpose: str
    filename: str
    bytes: int
    created: float

    def shape(self) -> dict:
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": int(self.created),
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }


@dataclass(slots=True)
class Line:
    batch_id: str
    line: int
    custom_id: str
    body: str  # JSON, as stored


class StorageFull(Exception):
    """The caller's files are at their bound; it must delete some first."""


class BatchStore:
    def __init__(
        self,
        path: str,
        max_files: int,
        max_bytes: int,
        max_batches: int,
        retention_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.max_files, self.max_bytes, self.max_batches = max_files, max_bytes, max_batches
        self.retention_s, self.clock = retention_s, clock
        self._file = SqliteFile(Path(path), "the batch store", log, clock)

    async def open(self) -> None:
        await self._file.open(schema(*_SCHEMA))
        await self.purge()

    async def close(self) -> None:
        await self._file.close()

    # files

    async def put_file(self, caller: str, purpose: str, filename: str, content: bytes) -> StoredFile:
        """Raises StorageFull where the caller's files would pass their count or bytes."""
        stored = StoredFile(new_id("file"), caller, purpose, filename, len(content), self.clock())
        async with self._file.transaction() as db:
            async with db.execute(
                "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM files WHERE caller = ?", (caller,)
            ) as cur:
                count, used = await cur.fetchone() or (0, 0)
            if count + 1 > self.max_files or used + len(content) > self.max_bytes:
                raise StorageFull(
                    f"your files would pass the bound of {self.max_files} files or {self.max_bytes} "
                    f"bytes (now {count} files, {used} bytes); delete some first"
                )
            await db.execute(
                "INSERT INTO files VALUES (?, ?, ?, ?, ?, ?, ?)",
                (stored.id, caller, purpose, filename, len(content), stored.created, content),
            )
        return stored

    async def file(self, file_id: str, caller: str) -> StoredFile | None:
        async with self._file.connected().execute(
            "SELECT id, caller, purpose, filename, bytes, created FROM files WHERE id = ? AND caller = ?",
            (file_id, caller),
        ) as cur:
            row = await cur.fetchone()
        return StoredFile(*row) if row is not None else None

    async def content(self, file_id: str, caller: str) -> bytes | None:
        async with self._file.connected().execute(
            "SELECT content FROM files WHERE id = ? AND caller = ?", (file_id, caller)
        ) as cur:
            row = await cur.fetchone()
        return bytes(row[0]) if row is not None else None

    async def files(
        self, caller: str, purpose: str | None, after: str | None, limit: int, descending: bool
    ) -> list[StoredFile]:
        order = "DESC" if descending else "ASC"
        query = f"SELECT id, caller, purpose, filename, bytes, created FROM files WHERE caller = ? {{}} ORDER BY created {order}, id {order}"
        where, args = _after("files", after, caller, descending)
        if purpose is not None:
            where, args = where + " AND purpose = ?", [*args, purpose]
        async with self._file.connected().execute(query.format(where) + " LIMIT ?", (caller, *args, limit)) as cur:
            return [StoredFile(*row) async for row in cur]

    async def delete_file(self, file_id: str, caller: str) -> bool:
        async with self._file.transaction() as db:
            cur = await db.execute("DELETE FROM files WHERE id = ? AND caller = ?", (file_id, caller))
        return cur.rowcount > 0

    # batches

    async def put_batch(self, caller: str, namespace: str, batch: dict, max_unfinished: int | None = None) -> None:
        """`namespace`: the caller's cache namespace, which its lines run in (it comes from the key).
        StorageFull where the caller has `max_unfinished` unfinished batches already: counted in the
        same transaction, since 30 concurrent creates against a count taken before left 5 of 2."""
        async with self._file.transaction() as db:
            if max_unfinished is not None and await self._unfinished(db, caller) >= max_unfinished:
                raise StorageFull(f"{max_unfinished} of your batches are not finished yet")
            await db.execute(
                "INSERT INTO batches VALUES (?, ?, ?, ?, ?, ?)",
                (batch["id"], caller, namespace, self.clock(), batch["status"], json.dumps(batch)),
            )
        await self._bound_batches(caller)

    async def unfinished_of(self, caller: str) -> int:
        return await self._unfinished(self._file.connected(), caller)

    @staticmethod
    async def _unfinished(db: aiosqlite.Connection, caller: str) -> int:
        marks = ", ".join("?" * len(UNFINISHED))
        async with db.execute(
            f"SELECT COUNT(*) FROM batches WHERE caller = ? AND status IN ({marks})", (caller, *UNFINISHED)
        ) as cur:
            row = await cur.fetchone()
        return row[0] if row is not None else 0

    async def cancel(self, batch_id: str, caller: str) -> dict | None:
        """`cancelling`, if it is still validating or in progress (one statement: a batch that
        finished meanwhile stays finished); the batch as it is now either way, None if not the caller's."""
        now = int(self.clock())
        async with self._file.transaction() as db:
            await db.execute(
                "UPDATE batches SET status = 'cancelling', batch = json_set(batch, '$.status', "
                "'cancelling', '$.cancelling_at', ?) WHERE id = ? AND caller = ? AND status IN "
                "('validating', 'in_progress')",
                (now, batch_id, caller),
            )
        return await self.batch(batch_id, caller)

    async def update_batch(
        self,
        batch: dict,
        was: str,
        lines: Iterable[Line] = (),
        outputs: Iterable[tuple[str, bytes]] = (),
        caller: str | None = None,
    ) -> bool:
        """A batch's new state, with the lines it starts (validated) or the files it ends with
        (output, errors), in one transaction; only if its status is still `was` (a cancel may
        have come between), else nothing changes and False. A batch that ends keeps only its lines'
        states (its counts), its files holding their requests and answers: kept twice, 15 batches
        made and cancelled from one 1.8 MB file held 35 MB against a 2 MB bound on the caller's files."""
        async with self._file.transaction() as db:
            cur = await db.execute(
                "UPDATE batches SET status = ?, batch = ? WHERE id = ? AND status = ?",
                (batch["status"], json.dumps(batch), batch["id"], was),
            )
            if cur.rowcount == 0:
                return False
            await db.executemany(
                "INSERT OR IGNORE INTO lines VALUES (?, ?, ?, ?, ?, NULL)",
                [(line.batch_id, line.line, line.custom_id, line.body, PENDING) for line in lines],
            )
            for file_id, content in outputs:
                await db.execute(
                    "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (file_id, caller, "batch_output", f"{file_id}.jsonl", len(content), self.clock(), content),
                )
            if batch["status"] not in UNFINISHED:
                await db.execute("UPDATE lines SET body = '', result = NULL WHERE batch_id = ?", (batch["id"],))
        return True

    async def batch(self, batch_id: str, caller: str | None) -> dict | None:
        """One batch (any caller's when `caller` is None: the runner's own reads)."""
        query, args = "SELECT batch FROM batches WHERE id = ?", [batch_id]
        if caller is not None:
            query, args = query + " AND caller = ?", [*args, caller]
        async with self._file.connected().execute(query, args) as cur:
            row = await cur.fetchone()
        return json.loads(row[0]) if row is not None else None

    async def batches(self, caller: str, after: str | None, limit: int) -> list[dict]:
        where, args = _after("batches", after, caller, True)
        async with self._file.connected().execute(
            f"SELECT batch FROM batches WHERE caller = ? {where} ORDER BY created DESC, id DESC LIMIT ?",
            (caller, *args, limit),
        ) as cur:
            return [json.loads(row[0]) async for row in cur]

    async def unfinished(self) -> list[tuple[str, str, dict]]:
        """(caller, namespace, batch) of every batch not yet ended, oldest first."""
        marks = ", ".join("?" * len(UNFINISHED))
        async with self._file.connected().execute(
            f"SELECT caller, namespace, batch FROM batches WHERE status IN ({marks}) ORDER BY created", UNFINISHED
        ) as cur:
            return [(row[0], row[1], json.loads(row[2])) async for row in cur]

    # lines

    async def pending(self, batch_id: str, skip: set[int], limit: int) -> list[Line]:
        async with self._file.connected().execute(
            "SELECT line, custom_id, body FROM lines WHERE batch_id = ? AND state = ? ORDER BY rowid LIMIT ?",
            (batch_id, PENDING, limit + len(skip)),
        ) as cur:
            rows = [row async for row in cur if row[0] not in skip]
        return [Line(batch_id, row[0], row[1], row[2]) for row in rows[:limit]]

    async def finish_line(self, batch_id: str, line: int, state: str, result: dict) -> None:
        """A line's answer, kept only while its batch is unfinished: one that ended meanwhile (given
        up, expired, cancelled) has its files and counts already and its rows cleared."""
        marks = ", ".join("?" * len(UNFINISHED))
        async with self._file.transaction() as db:
            await db.execute(
                "UPDATE lines SET state = ?, result = ? WHERE batch_id = ? AND line = ? AND state = ? AND "
                f"EXISTS (SELECT 1 FROM batches WHERE id = ? AND status IN ({marks}))",
                (state, json.dumps(result), batch_id, line, PENDING, batch_id, *UNFINISHED),
            )

    async def fail_pending(self, batch_id: str, result: Callable[[str], dict]) -> None:
        """Every line not answered yet ends failed (the batch was cancelled or expired)."""
        async with self._file.transaction() as db:
            async with db.execute(
                "SELECT line, custom_id FROM lines WHERE batch_id = ? AND state = ?", (batch_id, PENDING)
            ) as cur:
                rows = list(await cur.fetchall())
            await db.executemany(
                "UPDATE lines SET state = ?, result = ? WHERE batch_id = ? AND line = ?",
                [(FAILED, json.dumps(result(row[1])), batch_id, row[0]) for row in rows],
            )

    async def counts(self, batch_id: str) -> dict[str, int]:
        async with self._file.connected().execute(
            "SELECT state, COUNT(*) FROM lines WHERE batch_id = ? GROUP BY state", (batch_id,)
        ) as cur:
            return {row[0]: row[1] async for row in cur}

    async def results(self, batch_id: str, state: str) -> list[str]:
        async with self._file.connected().execute(
            "SELECT result FROM lines WHERE batch_id = ? AND state = ? ORDER BY line", (batch_id, state)
        ) as cur:
            return [row[0] async for row in cur]

    # bounds

    async def purge(self) -> None:
        """Past the retention: finished batches (their lines too) and files no unfinished batch reads."""
        cutoff = self.clock() - self.retention_s
        marks = ", ".join("?" * len(UNFINISHED))
        async with self._file.transaction() as db:
            await db.execute(
                f"DELETE FROM lines WHERE batch_id IN (SELECT id FROM batches WHERE created < ? AND "
                f"status NOT IN ({marks}))",
                (cutoff, *UNFINISHED),
            )
            await db.execute(
                f"DELETE FROM batches WHERE created < ? AND status NOT IN ({marks})", (cutoff, *UNFINISHED)
            )
            await db.execute(f"DELETE FROM files WHERE created < ? AND id NOT IN ({_IN_USE})", (cutoff, *UNFINISHED))

    async def _bound_batches(self, caller: str) -> None:
        """The caller's oldest finished batches past its bound go, with their lines and result files."""
        marks = ", ".join("?" * len(UNFINISHED))
        oldest = (
            f"SELECT id FROM batches WHERE caller = ? AND status NOT IN ({marks}) ORDER BY created "
            f"LIMIT max(0, (SELECT COUNT(*) FROM batches WHERE caller = ?) - ?)"
        )
        args = (caller, *UNFINISHED, caller, self.max_batches)
        async with self._file.transaction() as db:
            async with db.execute(oldest, args) as cur:
                gone = [row[0] for row in await cur.fetchall()]
            for batch_id in gone:
                async with db.execute(
                    "SELECT json_extract(batch, '$.output_file_id'), json_extract(batch, "
                    "'$.error_file_id') FROM batches WHERE id = ?",
                    (batch_id,),
                ) as cur:
                    files = [f for row in await cur.fetchall() for f in row if f]
                await db.executemany("DELETE FROM files WHERE id = ? AND caller = ?", [(f, caller) for f in files])
                await db.execute("DELETE FROM lines WHERE batch_id = ?", (batch_id,))
                await db.execute("DELETE FROM batches WHERE id = ?", (batch_id,))


_IN_USE = (
    f"SELECT json_extract(batch, '$.input_file_id') FROM batches WHERE status IN ({', '.join('?' * len(UNFINISHED))})"
)


def _after(table: str, after: str | None, caller: str, descending: bool) -> tuple[str, list]:
    """The page after the item `after` (a cursor, as OpenAI's lists take it)."""
    if after is None:
        return "", []
    op = "<" if descending else ">"
    return (f"AND (created, id) {op} (SELECT created, id FROM {table} WHERE id = ? AND caller = ?)", [after, caller])
