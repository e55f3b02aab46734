"""A restarted server starts its running limit where the last one left it (scheduler.limit.pace_path),
not at `initial`: the pace is kept at shutdown, per engine, and read back once the engine is up."""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

import httpx

from scheduler.learned_pace import LearnedPace
from tests.conftest import live_server


def chat(url: str) -> None:
    body = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 40}
    httpx.post(url + "/v1/chat/completions", json=body, timeout=30)


def test_a_restarted_server_starts_from_the_running_limit_the_last_one_learned(tmp_path: Path):
    path = tmp_path / "pace.sqlite3"
    setting = f"scheduler.limit.pace_path={path}"
    with live_server(setting) as first:
        slots = first.status()["slots"]
    with sqlite3.connect(path) as db:
        (engine, saved_at, learned), *others = db.execute("SELECT engine, saved_at, learned FROM pace").fetchall()
    kept = LearnedPace.model_validate_json(learned)
    assert not others and kept.limit == slots > 5
    with sqlite3.connect(path) as db:  # as if the first had found the engine's knee at 5
        db.execute("UPDATE pace SET learned = ?", (kept.model_copy(update={"limit": 5.0}).model_dump_json(),))

    with live_server(setting, "engine.sim.token_latency_ms=20") as second:
        second.wait_for(lambda s: s["slots"] == 5)
        threads = [threading.Thread(target=chat, args=(second.url,)) for _ in range(8)]
        for thread in threads:
            thread.start()
        second.wait_for(lambda s: s["running"] == 5 and s["waiting_total"] == 3)
        for thread in threads:
            thread.join(30)
    with sqlite3.connect(path) as db:
        (again, saved_again), *others = db.execute("SELECT engine, saved_at FROM pace").fetchall()
    assert not others and again == engine and saved_again > saved_at  # the same engine's row, saved again


def test_a_pace_file_that_will_not_open_leaves_the_server_serving(tmp_path: Path, caplog):
    caplog.set_level(logging.WARNING)
    (tmp_path / "a-file").write_text("not a folder")
    with live_server(f"scheduler.limit.pace_path={tmp_path}/a-file/pace.sqlite3") as live:
        body = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        assert httpx.post(live.url + "/v1/chat/completions", json=body, timeout=30).status_code == 200
    assert "the pace file will not open" in caplog.text
