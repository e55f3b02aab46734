"""The response store on a real SQLite file: per caller, bounded by age and count, chains, a
corrupt file set aside, and nothing acknowledged lost to a `kill -9`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from responses.store import ChainBroken, ResponseStore, StoredResponse
from tests.app_process import free_port, start_app


def stored(rid: str, caller: str = "alice", created: float = 0.0, previous: str | None = None) -> StoredResponse:
    return StoredResponse(
        rid,
        caller,
        created,
        previous,
        {"id": rid, "output": [{"type": "message", "id": f"m-{rid}"}]},
        [{"type": "message", "role": "user", "content": rid}],
    )


async def opened(path: Path, clock, **bounds) -> ResponseStore:
    store = ResponseStore(
        str(path), bounds.get("ttl_s", 100.0), bounds.get("max_responses", 100), clock, bounds.get("max_per_caller")
    )
    await store.open()
    return store


async def test_a_chain_reads_back_oldest_first_and_only_for_its_caller(tmp_path):
    store = await opened(tmp_path / "r.sqlite3", lambda: 10.0)
    await store.put(stored("a", created=1))
    await store.put(stored("b", created=2, previous="a"))
    items = await store.history("b", "alice")
    assert [i.get("content") or i["id"] for i in items] == ["a", "m-a", "b", "m-b"]
    assert await store.get("b", "bob") is None
    with pytest.raises(KeyError):
        await store.history("b", "bob")
    assert await store.delete("a", "alice") and not await store.delete("a", "alice")
    with pytest.raises(ChainBroken):
        await store.history("b", "alice")
    await store.close()


async def test_age_and_count_bound_the_store_across_a_reopen(tmp_path):
    now = [10.0]
    path = tmp_path / "r.sqlite3"
    store = await opened(path, lambda: now[0], ttl_s=5.0, max_responses=2)
    for i, rid in enumerate("abc"):
        await store.put(stored(rid, created=8.0 + i * 0.1))
    assert await store.get("a", "alice") is None and await store.get("c", "alice") is not None  # count
    now[0] = 13.2
    assert await store.get("b", "alice") is None and await store.get("c", "alice") is not None  # age
    await store.close()
    store = await opened(path, lambda: now[0], ttl_s=5.0, max_responses=2)
    assert (await store.get("c", "alice")).response["id"] == "c"
    await store.close()


async def test_a_caller_past_its_own_bound_pushes_out_only_its_own_oldest(tmp_path):
    store = await opened(tmp_path / "r.sqlite3", lambda: 10.0, max_responses=100, max_per_caller=3)
    await store.put(stored("a1", "alice", created=1.0))
    for i in range(10):
        await store.put(stored(f"m{i}", "mallory", created=2.0 + i))
    assert await store.get("a1", "alice") is not None
    kept = [i for i in range(10) if await store.get(f"m{i}", "mallory") is not None]
    assert kept == [7, 8, 9]
    await store.close()


async def test_a_corrupt_file_is_moved_aside_with_a_warning(tmp_path, caplog):
    path = tmp_path / "r.sqlite3"
    path.write_bytes(b"not a database" * 100)
    with caplog.at_level(logging.WARNING, logger="gpt_oss_webui.responses"):
        store = await opened(path, lambda: 10.0)
    await store.put(stored("a"))
    assert (await store.get("a", "alice")) is not None
    assert len(list(tmp_path.glob("r.sqlite3.corrupt-*"))) == 1
    assert any("unreadable" in r.getMessage() for r in caplog.records)
    await store.close()


def test_kill_9_during_a_burst_loses_no_completed_response(tmp_path):
    """SIGKILL while stored responses are being made: every one whose client heard it completed
    is there after a restart."""
    path = tmp_path / "r.sqlite3"
    port = free_port()
    args = [
        sys.executable,
        "app.py",
        "--port",
        str(port),
        "--set",
        "engine.backend=sim",
        "--set",
        "server.ui=false",
        "--set",
        "engine.sim.token_latency_ms=2",
        "--set",
        "cache.enabled=false",
        "--set",
        "logging.file=",
        "--set",
        "monitor.gpu=false",
        "--set",
        f"responses.path={path}",
    ]
    url = f"http://127.0.0.1:{port}"
    proc = start_app(args, url)
    try:
        completed = asyncio.run(_burst_then_kill(url, proc))
        proc = start_app(args, url)
        with httpx.Client(base_url=url, timeout=10) as client:
            missing = [rid for rid in completed if client.get(f"/v1/responses/{rid}").status_code != 200]
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert len(completed) >= 20 and not missing


async def _burst_then_kill(url: str, proc: subprocess.Popen) -> list[str]:
    completed: list[str] = []

    async def one(client: httpx.AsyncClient, i: int) -> None:
        body = {"model": "sim", "input": f"burst {i}", "max_output_tokens": 8}
        with contextlib.suppress(httpx.HTTPError):
            response = await client.post("/v1/responses", json=body)
            if response.status_code == 200 and response.json()["status"] in ("completed", "incomplete"):
                completed.append(response.json()["id"])
                if len(completed) == 20:
                    os.kill(proc.pid, signal.SIGKILL)

    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        await asyncio.gather(*(one(client, i) for i in range(200)))
    proc.wait(timeout=10)
    return completed
