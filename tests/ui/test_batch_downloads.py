"""The page's download of a job's output: one private copy per file, handed out again, the caller's only."""

from __future__ import annotations

import stat

from batches.store import BatchStore
from pipeline.caller import Caller
from ui.batch.api_jobs import cancel, download


async def test_a_jobs_output_is_written_once_privately_and_only_for_its_owner(tmp_path):
    store = BatchStore(str(tmp_path / "b.sqlite3"), max_files=10, max_bytes=10**6, max_batches=10, retention_s=3600)
    await store.open()
    try:
        await _written_once(store, tmp_path / "cache")
    finally:
        await store.close()


async def _written_once(store: BatchStore, root) -> None:
    output = await store.put_file("alice", "batch_output", "out.jsonl", b'{"custom_id": "a"}\n')
    await store.put_batch("alice", "", {"id": "batch_1", "status": "completed", "output_file_id": output.id})
    alice = Caller("alice")
    paths = [await download(store, alice, " batch_1 ", "output", root) for _ in range(20)]
    assert paths[0] is not None and set(paths) == {paths[0]}  # polled 20 times: one copy
    assert [p.name for p in root.iterdir()] == [paths[0].parent.name]
    assert paths[0].read_bytes() == b'{"custom_id": "a"}\n'
    assert stat.S_IMODE(paths[0].stat().st_mode) == 0o600 and stat.S_IMODE(paths[0].parent.stat().st_mode) == 0o700
    assert await download(store, Caller("bob"), "batch_1", "output", root) is None
    assert await download(store, alice, "batch_1", "error", root) is None  # no error file: none made
    assert await download(store, alice, None, "output", root) is None  # a Textbox may send null
    assert await cancel(store, None, alice, None) == "no such batch"  # type: ignore[arg-type]  # no runner reached
    assert await store.delete_file(output.id, "alice")
    assert await download(store, alice, "batch_1", "output", root) is None  # deleted: not from its copy
    assert not paths[0].parent.exists()  # nor from its link: Gradio serves what its cache holds
