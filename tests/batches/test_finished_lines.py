"""A batch that ends keeps its lines' states, not their requests and answers (those are in its files)."""

from __future__ import annotations

import sqlite3
from contextlib import closing

from batches.store import DONE, BatchStore, Line

STATE = {"id": "batch_1", "status": "validating"}


async def _in_progress(path, body: str) -> BatchStore:
    """A store holding alice's batch_1 in progress with lines 1 and 2 of `body`."""
    store = BatchStore(str(path), max_files=10, max_bytes=10**6, max_batches=10, retention_s=3600)
    await store.open()
    await store.put_batch("alice", "", STATE)
    lines = [Line("batch_1", n, f"req-{n}", body) for n in (1, 2)]
    await store.update_batch({**STATE, "status": "in_progress"}, "validating", lines=lines)
    return store


async def test_an_ended_batch_keeps_its_counts_and_drops_what_its_files_hold(tmp_path):
    path = tmp_path / "b.sqlite3"
    store = await _in_progress(path, '{"messages": "' + "x" * 10_000 + '"}')
    try:
        await store.finish_line("batch_1", 1, DONE, {"answer": "y" * 10_000})
        assert _stored(path) > 30_000  # running: the requests and the answer so far
        done = {**STATE, "status": "cancelled", "output_file_id": "file-out"}
        assert await store.update_batch(done, "in_progress", outputs=[("file-out", b"{}\n")], caller="alice")
        assert _stored(path) == 0
        assert await store.counts("batch_1") == {DONE: 1, "pending": 1}
        assert await store.content("file-out", "alice") == b"{}\n"
    finally:
        await store.close()


async def test_a_line_that_ends_after_its_batch_writes_nothing(tmp_path):
    """A batch given up as failed while a line still ran: its answer must not refill the cleared rows."""
    path = tmp_path / "b.sqlite3"
    store = await _in_progress(path, '{"messages": "hi"}')
    try:
        await store.finish_line("batch_1", 1, DONE, {"answer": "kept"})
        assert await store.update_batch({**STATE, "status": "failed"}, "in_progress")
        await store.finish_line("batch_1", 2, DONE, {"answer": "y" * 10_000})
        assert _stored(path) == 0
        assert await store.counts("batch_1") == {DONE: 1, "pending": 1}
    finally:
        await store.close()


def _stored(path) -> int:
    with closing(sqlite3.connect(path)) as db:
        return db.execute("SELECT COALESCE(SUM(LENGTH(body) + COALESCE(LENGTH(result), 0)), 0) FROM lines").fetchone()[
            0
        ]
