"""A caller's unfinished batches stay within `max_unfinished` however many creates race."""

from __future__ import annotations

import asyncio

import pytest

from batches.store import BatchStore, StorageFull


async def test_concurrent_creates_past_the_bound_are_refused_not_stored(tmp_path):
    store = BatchStore(str(tmp_path / "b.sqlite3"), max_files=10, max_bytes=10**6, max_batches=100, retention_s=3600)
    await store.open()
    try:
        created = await asyncio.gather(
            *(
                store.put_batch("alice", "", {"id": f"batch_{i}", "status": "validating"}, max_unfinished=2)
                for i in range(30)
            ),
            return_exceptions=True,
        )
        assert sum(r is None for r in created) == 2
        assert all(isinstance(r, StorageFull) for r in created if r is not None)
        assert await store.unfinished_of("alice") == 2
        await store.put_batch("bob", "", {"id": "batch_bob", "status": "validating"}, max_unfinished=2)  # his own
        with pytest.raises(StorageFull, match="2 of your batches"):
            await store.put_batch("alice", "", {"id": "batch_more", "status": "in_progress"}, max_unfinished=2)
    finally:
        await store.close()
