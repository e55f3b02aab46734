"""The response cache on a real Redis, shared by two gateways (two real servers of ours on the
simulator): an answer from one is a hit on the other, and two gateways asked the same thing at
once generate it once."""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.conftest import live_server, redis_server

BODY = {
    "model": "sim",
    "messages": [{"role": "user", "content": "shared question"}],
    "max_tokens": 30,
    "temperature": 0,
}


def gateways(redis_url: str, *extra: str):
    settings = ("cache.enabled=true", "cache.backend=redis", f"state.redis_url={redis_url}", *extra)
    return live_server(*settings), live_server(*settings)


def post(url: str, body: dict) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=30)


def test_an_answer_from_one_gateway_is_a_hit_on_the_other(redis_url: str) -> None:
    a, b = gateways(redis_url)
    with a as first, b as second:
        body = {**BODY, "seed": int(time.time())}
        fresh = post(first.url, body)
        assert fresh.headers["x-cache"] == "MISS"
        again = post(second.url, body)
        assert again.headers["x-cache"] == "HIT"
        assert again.json()["choices"][0]["message"] == fresh.json()["choices"][0]["message"]
        assert second.services.engine.stats().generated_tokens == 0  # never reached the engine
        stats = httpx.get(second.url + "/v1/cache/stats", timeout=10).json()
        assert stats["backend"] == "redis" and stats["hits"] == 1
        assert httpx.delete(second.url + "/v1/cache", timeout=10).json()["removed"] >= 1
        assert post(first.url, body).headers["x-cache"] == "MISS"  # cleared for everyone


def test_the_same_question_at_two_gateways_at_once_is_generated_once(redis_url: str) -> None:
    a, b = gateways(redis_url, "engine.sim.token_latency_ms=20")
    with a as first, b as second, ThreadPoolExecutor(2) as pool:
        body = {**BODY, "seed": int(time.time()) + 1}
        answers = list(pool.map(lambda url: post(url, body), (first.url, second.url)))
        assert [r.status_code for r in answers] == [200, 200]
        assert answers[0].json()["choices"][0]["message"] == answers[1].json()["choices"][0]["message"]
        generated = [g.services.engine.stats().generated_tokens for g in (first, second)]
        assert sorted(generated) == [0, 30], generated


def test_a_redis_that_goes_away_costs_hits_not_answers(tmp_path) -> None:
    with (
        contextlib.ExitStack() as redis,
        live_server(
            "cache.enabled=true",
            "cache.backend=redis",
            f"state.redis_url={redis.enter_context(redis_server(str(tmp_path)))}",
        ) as live,
    ):
        assert post(live.url, {**BODY, "seed": 7}).status_code == 200
        redis.close()  # the Redis server stops; the gateway goes on
        answer = post(live.url, {**BODY, "seed": 8})
        assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"]
        assert live.services.cache.errors >= 1


def test_a_gateway_refuses_to_start_without_its_redis() -> None:
    with pytest.raises(RuntimeError, match="Redis does not answer"):
        with live_server("cache.enabled=true", "cache.backend=redis", "state.redis_url=redis://127.0.0.1:1/0"):
            pass
