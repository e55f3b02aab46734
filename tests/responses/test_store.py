"""The response store on a real SQLite file: per caller, bounded by age and count, chains, a
corrupt file set aside, and nothing acknowledged lost to a `kill -9`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sqlite3
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
        str(path),
        bounds.get("ttl_s", 100.0),
        bounds.get("max_responses", 100),
        clock,
        bounds.get("max_per_caller"),
        bounds.get("max_bytes"),
        bounds.get("max_bytes_per_caller"),
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


def sized(rid: str, caller: str, created: float, kib: int) -> StoredResponse:
    response = stored(rid, caller, created)
    response.input_items[0]["content"] = "x" * kib * 1024
    return response


def held(path: Path) -> tuple[dict[str, int], dict[str, int]]:
    """Each caller's bytes as the store keeps them, and as counted here from the rows."""
    with sqlite3.connect(path) as db:
        kept = dict(db.execute("SELECT caller, bytes FROM held WHERE bytes > 0").fetchall())
        counted: dict[str, int] = {}
        for caller, response, items in db.execute("SELECT caller, response, input_items FROM responses"):
            counted[caller] = counted.get(caller, 0) + len(response.encode()) + len(items.encode()) + 128
    return kept, counted


async def test_bytes_bound_a_callers_own_oldest_then_everyones_oldest(tmp_path):
    path = tmp_path / "r.sqlite3"
    store = await opened(path, lambda: 10.0, max_bytes=300 * 1024, max_bytes_per_caller=100 * 1024)
    await store.put(sized("a1", "alice", 1.0, 40))
    await store.put(sized("b1", "bob", 2.0, 40))
    for i in range(5):
        await store.put(sized(f"m{i}", "mallory", 3.0 + i, 40))
    mallory = [i for i in range(5) if await store.get(f"m{i}", "mallory") is not None]
    assert mallory == [3, 4]  # two of 40 KiB fit in 100, three do not
    assert await store.get("a1", "alice") is not None and await store.get("b1", "bob") is not None
    for caller in ("carol", "dave"):
        await store.put(sized(f"{caller}1", caller, 9.0, 80))
    assert await store.get("a1", "alice") is None  # the oldest of anyone's went for the total
    assert await store.get("b1", "bob") is not None
    kept, counted = held(path)
    assert kept == counted and sum(kept.values()) <= 300 * 1024
    await store.update("m4", "mallory", {"id": "m4", "output": [{"type": "message", "text": "y" * 70 * 1024}]})
    assert await store.get("m3", "mallory") is None and await store.get("m4", "mallory") is not None
    await store.put(sized("carol1", "carol", 9.5, 1))  # the same id again replaces it
    kept, counted = held(path)
    assert kept == counted and kept["carol"] < 2 * 1024
    await store.close()


async def test_a_file_from_before_the_bytes_is_counted_when_opened(tmp_path):
    path = tmp_path / "r.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE responses (id TEXT PRIMARY KEY, caller TEXT NOT NULL, created REAL NOT NULL, "
            "previous_id TEXT, response TEXT NOT NULL, input_items TEXT NOT NULL)"
        )
        for i in range(3):
            db.execute(
                "INSERT INTO responses VALUES (?, 'alice', ?, NULL, ?, ?)",
                (f"r{i}", i, json.dumps({"output": []}), json.dumps(["z" * 50 * 1024])),
            )
    store = await opened(path, lambda: 10.0, max_bytes_per_caller=120 * 1024)
    kept, counted = held(path)
    assert kept == counted and kept["alice"] > 120 * 1024
    await store.put(sized("new", "alice", 5.0, 1))
    assert [rid for rid in ("r0", "r1", "r2", "new") if await store.get(rid, "alice")] == ["r1", "r2", "new"]
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
