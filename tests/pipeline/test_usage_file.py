"""The usage ledger on disk: written once a second, rolled up past two days, bounded by its
retention; read back after a restart into the ledger and the quotas; OpenAI's Usage API over it;
and a `kill -9` that loses no more than the last second."""

from __future__ import annotations

import signal
import sqlite3
import sys
import time
from contextlib import closing
from pathlib import Path

import httpx

from pipeline.rate_limit import RateLimiter
from pipeline.usage import BUCKET_S, UsageLedger, UsageTotals
from pipeline.usage_buckets import page
from pipeline.usage_file import HOUR_S, UsageFile, restore
from tests.app_process import free_port, start_app
from tests.conftest import live_server

DAY = 86_400.0


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def test_minutes_roll_up_into_hours_and_leave_after_the_retention(tmp_path) -> None:
    clock = Clock(100 * DAY)
    file = UsageFile(str(tmp_path / "u.sqlite3"), retention_s=10 * DAY, clock=clock)
    await file.open()
    for seconds_ago in (0.1 * DAY, 3 * DAY, 3 * DAY - 60, 20 * DAY):  # two minutes of one hour 3 days back; one past
        file.add(int((clock.now - seconds_ago) // BUCKET_S), "alice", UsageTotals(requests=1, prompt_tokens=10))
    await file.flush()
    before = await file.report(0, clock.now + 60)
    await file.maintain()
    rows = await file.rows(0, clock.now + 60)
    assert sorted(width for _, width, _, _ in rows) == [BUCKET_S, HOUR_S]  # today's minute, and one hour
    assert (await file.report(0, clock.now + 60))["alice"].requests == before["alice"].requests - 1 == 3
    await file.close()
    assert (tmp_path / "u.sqlite3").stat().st_mode & 0o777 == 0o600


async def test_a_restart_reads_back_the_week_the_days_tokens_and_the_last_minute(tmp_path) -> None:
    clock = Clock(100 * DAY + 3600)
    file = UsageFile(str(tmp_path / "u.sqlite3"), retention_s=90 * DAY, clock=clock)
    await file.open()
    minute = int(clock.now // BUCKET_S)
    file.add(minute, "alice", UsageTotals(requests=3, prompt_tokens=300, completion_tokens=200))
    file.add(minute - 30, "alice", UsageTotals(requests=1, prompt_tokens=50))  # half an hour ago, today
    file.add(minute - 24 * 60, "alice", UsageTotals(requests=1, prompt_tokens=999))  # yesterday
    await file.close()
    again = UsageFile(str(tmp_path / "u.sqlite3"), retention_s=90 * DAY, clock=clock)
    await again.open()
    ledger, limiter = UsageLedger(clock=clock), RateLimiter(clock=clock)
    await restore(again, ledger, limiter)
    assert ledger.report(clock.now - DAY - 60, clock.now + 60)["alice"].requests == 5
    assert limiter.day_tokens("alice") == 550  # today's, not yesterday's
    from pipeline.caller import Caller
    from settings.schema import Limits

    alice = Caller("alice", limits=Limits(rpm=4))
    assert limiter.headers(alice)["x-ratelimit-remaining-requests"] == "1"  # the last minute's 3 still count
    await again.close()


def test_buckets_in_openais_shape_grouped_by_key_and_paged() -> None:
    rows = [
        (600, 60, "alice", UsageTotals(requests=2, prompt_tokens=10, completion_tokens=5)),
        (660, 60, "bob", UsageTotals(requests=1, prompt_tokens=1, completion_tokens=1)),
        (3600, 3600, "alice", UsageTotals(requests=1, prompt_tokens=7)),
    ]
    first = page(rows, 0, 7200, "1h", 1, ("api_key_id",), "m")
    [bucket] = first.buckets
    assert (bucket["start_time"], bucket["end_time"], first.next_start) == (0, 3600, 3600)
    assert [(r["api_key_id"], r["input_tokens"], r["num_model_requests"]) for r in bucket["results"]] == [
        ("alice", 10, 2),
        ("bob", 1, 1),
    ]
    last = page(rows, 3600, 7200, "1h", 1, ("model",), "m")
    assert last.next_start is None and last.buckets[0]["results"][0]["model"] == "m"


def test_the_usage_api_answers_admins_in_openais_shape(tmp_path) -> None:
    keys = "server.keys=[{name: boss, key: sk-boss-00001, admin: true}, {name: alice, key: sk-alice-0001}]"
    with live_server(keys, f"usage.path={tmp_path / 'u.sqlite3'}") as live:
        alice = live.client(api_key="sk-alice-0001")
        for _ in range(2):
            alice.chat.completions.create(model="sim", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        url, start = f"{live.url}/v1/organization/usage/completions", int(time.time()) - 120
        got = httpx.get(
            url,
            params={"start_time": start, "bucket_width": "1m", "group_by": "api_key_id"},
            headers={"Authorization": "Bearer sk-boss-00001"},
        )
        assert got.status_code == 200, got.text
        results = [r for b in got.json()["data"] for r in b["results"]]
        assert [(r["api_key_id"], r["num_model_requests"], r["output_tokens"]) for r in results] == [("alice", 2, 8)]
        assert got.json()["object"] == "page" and all(b["object"] == "bucket" for b in got.json()["data"])
        denied = httpx.get(url, params={"start_time": start}, headers={"Authorization": "Bearer sk-alice-0001"})
        assert denied.status_code == 403
        bad = httpx.get(
            url,
            params={"start_time": start, "group_by": "project_id"},
            headers={"Authorization": "Bearer sk-boss-00001"},
        )
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "group_by"


def flushed(path: Path, tokens: int, timeout_s: float = 30) -> None:
    """Waits until the usage file holds `tokens` (the app flushes on an interval, not per request)."""
    deadline = time.monotonic() + timeout_s
    while True:
        with closing(sqlite3.connect(path)) as db:
            held = db.execute("SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0) FROM usage").fetchone()[0]
        if held >= tokens or time.monotonic() > deadline:
            return
        time.sleep(0.1)


def test_kill_9_keeps_usage_and_the_daily_quota(tmp_path) -> None:
    port = free_port()
    keys = "server.keys=[{name: alice, key: sk-alice-0001, daily_tokens: 200}]"
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
        "cache.enabled=false",
        "--set",
        "logging.file=",
        "--set",
        "monitor.gpu=false",
        "--set",
        f"usage.path={tmp_path / 'u.sqlite3'}",
        "--set",
        f"responses.path={tmp_path / 'r.sqlite3'}",
        "--set",
        f"batches.path={tmp_path / 'b.sqlite3'}",
        "--set",
        keys,
        "--set",
        "engine.sim.natural_stop=false",
    ]
    url, auth = f"http://127.0.0.1:{port}", {"Authorization": "Bearer sk-alice-0001"}
    body = {"model": "sim", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 40}
    proc = start_app(args, url)
    try:
        with httpx.Client(base_url=url, headers=auth, timeout=10) as client:
            spent = 0
            while (got := client.post("/v1/chat/completions", json=body)).status_code == 200:
                spent += got.json()["usage"]["total_tokens"]
            assert got.json()["error"]["code"] == "insufficient_quota" and spent > 150
            flushed(tmp_path / "u.sqlite3", spent)  # a flush interval or more
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        proc = start_app(args, url)
        with httpx.Client(base_url=url, headers=auth, timeout=10) as client:
            usage = client.get("/v1/usage").json()["data"][0]
            assert usage["total_tokens"] == spent and usage["tokens_today"] == spent
            refused = client.post("/v1/chat/completions", json=body)
            assert refused.status_code == 429 and refused.json()["error"]["code"] == "insufficient_quota"
    finally:
        proc.kill()
        proc.wait(timeout=10)
