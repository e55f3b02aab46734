"""Overload and disconnect storms against a live server on the simulator: no 5xx, every refusal a
429 with Retry-After, and nothing leaked afterwards (slots, token budget, single-flight waiters)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import httpx
import pytest

from tests.conftest import LiveServer

CHAT = "/v1/chat/completions"


def body(prompt: str, max_tokens: int, **extra) -> dict:
    return {
        "model": "sim",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        **extra,
    }


def metric(live: LiveServer, line_start: str) -> float:
    for line in httpx.get(live.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def assert_nothing_leaked(live: LiveServer) -> None:
    status = live.wait_for(lambda s: s["running"] == 0 and s["waiting_total"] == 0, timeout=20)
    assert status["tokens_in_use"] == 0 and status["free_slots"] == status["slots"], status
    assert live.services.engine.stats().running == 0
    assert len(live.services.pipeline.cache.flight) == 0


async def test_ten_times_capacity_gets_answers_or_429s_only(make_server):
    # two slots of 20 tokens at 10 ms: about 10 answers a second; 500 requests in 5 s is 10 x that
    live = make_server(
        "scheduler.max_concurrency=2",
        "scheduler.limit.adaptive=false",
        "scheduler.max_queue_size=16",
        "engine.sim.token_latency_ms=10",
        "engine.sim.batch_slowdown=0",
    )
    limits = httpx.Limits(max_connections=600, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=live.url, timeout=60, limits=limits) as client:

        async def one(i: int) -> httpx.Response:
            await asyncio.sleep(i / 100)
            return await client.post(CHAT, json=body(f"storm {i}", 20, stream=i % 2 == 0))

        responses = await asyncio.gather(*(one(i) for i in range(500)))
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {200, 429} and statuses.count(429) > 100 and statuses.count(200) > 20
    for refused in (r for r in responses if r.status_code == 429):
        assert int(refused.headers["retry-after"]) >= 1 and refused.json()["error"]["type"] == "rate_limit_error"
    assert all(
        "data: [DONE]" in r.text
        for r in responses
        if r.status_code == 200 and "event-stream" in r.headers["content-type"]
    )
    assert_nothing_leaked(live)


@pytest.mark.parametrize("cache", [True, False], ids=["cache-on", "cache-off"])
async def test_hundreds_of_random_disconnects_leak_nothing(make_server, tmp_path: Path, cache: bool):
    live = make_server(
        "scheduler.max_concurrency=4",
        "scheduler.limit.adaptive=false",
        "engine.sim.token_latency_ms=5",
        f"cache.enabled={str(cache).lower()}",
        f"cache.path={tmp_path / 'c.sqlite3'}",
    )
    rng = random.Random(7)
    limits = httpx.Limits(max_connections=400, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=live.url, timeout=60, limits=limits) as client:

        async def one(i: int) -> None:
            request = client.post(CHAT, json=body(f"prompt {i % 12}", rng.choice([5, 40, 120]), stream=i % 3 == 0))
            try:
                await asyncio.wait_for(request, timeout=rng.uniform(0, 0.6))
            except TimeoutError:
                pass  # the client left: in the body, the cache, the queue or the engine

        await asyncio.gather(*(one(i) for i in range(300)))
    assert_nothing_leaked(live)
    with httpx.Client(base_url=live.url, timeout=30) as http:
        assert http.post(CHAT, json=body("after the storm", 5)).status_code == 200


async def test_a_client_that_leaves_while_waiting_on_an_identical_answer_is_counted(make_server, tmp_path: Path):
    live = make_server("engine.sim.token_latency_ms=10", f"cache.path={tmp_path / 'c.sqlite3'}", "cache.enabled=true")
    async with httpx.AsyncClient(base_url=live.url, timeout=30) as client:
        leader = asyncio.ensure_future(client.post(CHAT, json=body("one answer", 100)))
        await asyncio.sleep(0.2)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(client.post(CHAT, json=body("one answer", 100)), timeout=0.3)
        assert (await leader).status_code == 200
    assert metric(live, 'gptoss_requests_abandoned_total{stage="cache"}') == 1
    assert_nothing_leaked(live)
