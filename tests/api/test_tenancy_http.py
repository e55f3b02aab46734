"""Teams over real HTTP on the simulator: named keys with classes and limits, OpenAI's rate-limit
headers, fair share between callers of one class, and usage that adds up."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.conftest import LiveServer, live_server

KEYS = (
    "server.keys=[{name: alice, key: sk-alice-0001, rpm: 3}, {name: bob, key: sk-bob-00001, tpm: 300},"
    " {name: gus, key: sk-gus-00001, tpm: 300},"
    " {name: carol, key: sk-carol-001, daily_tokens: 200}, {name: dave, key: sk-dave-0001, max_parallel: 1,"
    " max_queued: 1}, {name: erin, key: sk-erin-0001, class: low},"
    f" {{name: fay, key_sha256: {hashlib.sha256(b'sk-fay-00001').hexdigest()}, class: high}},"
    " {name: ops, key: sk-ops-00001, admin: true}]"
)
SECRETS = [
    "sk-alice-0001",
    "sk-bob-00001",
    "sk-gus-00001",
    "sk-carol-001",
    "sk-dave-0001",
    "sk-erin-0001",
    "sk-fay-00001",
    "sk-ops-00001",
]


def ask(live: LiveServer, key: str, max_tokens: int = 8, **extra) -> httpx.Response:
    body = {"model": "sim", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": max_tokens, **extra}
    return httpx.post(
        live.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )


def usage(live: LiveServer, key: str, **params) -> httpx.Response:
    return httpx.get(live.url + "/v1/usage", params=params, headers={"Authorization": f"Bearer {key}"}, timeout=10)


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    cache = tmp_path_factory.mktemp("cache") / "c.sqlite3"
    with live_server(KEYS, "cache.enabled=true", f"cache.path={cache}") as live:
        yield live


def test_rpm_answers_carry_openai_headers_and_the_fourth_is_refused(team: LiveServer) -> None:
    remaining = []
    for _ in range(3):
        answer = ask(team, "sk-alice-0001")
        assert answer.status_code == 200 and answer.headers["x-ratelimit-limit-requests"] == "3"
        remaining.append(answer.headers["x-ratelimit-remaining-requests"])
    assert remaining == ["2", "1", "0"]
    refused = ask(team, "sk-alice-0001")
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    error = refused.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and "alice" in error["message"] and "3 requests" in error["message"]
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert ask(team, "sk-bob-00001").status_code == 200  # another caller is not affected


def test_tpm_counts_prompt_and_completion(team: LiveServer) -> None:
    spent, prompt, answer = 0, 0, ask(team, "sk-gus-00001", max_tokens=60, cache=False)
    while answer.status_code == 200:
        spent += answer.json()["usage"]["total_tokens"]
        prompt = answer.json()["usage"]["prompt_tokens"]
        assert answer.headers["x-ratelimit-limit-tokens"] == "300"
        assert answer.headers["x-ratelimit-remaining-tokens"] == str(300 - spent + 60)  # before the completion
        answer = ask(team, "sk-gus-00001", max_tokens=60, cache=False)
    assert answer.status_code == 429 and "300 tokens per minute" in answer.json()["error"]["message"]
    remaining = int(answer.headers["x-ratelimit-remaining-tokens"])
    assert remaining == max(0, 300 - spent) and remaining < prompt


def test_the_daily_quota_refuses_with_insufficient_quota(team: LiveServer) -> None:
    codes = [ask(team, "sk-carol-001", max_tokens=60, cache=False).status_code for _ in range(5)]
    assert codes[:2] == [200, 200] and 429 in codes
    refused = ask(team, "sk-carol-001")
    assert refused.json()["error"]["code"] == "insufficient_quota" and int(refused.headers["retry-after"]) <= 86_400


def test_a_keys_class_is_its_default_and_its_ceiling(team: LiveServer) -> None:
    low = ask(team, "sk-erin-0001")
    assert low.headers["x-priority"] == "low"
    asked_high = httpx.post(
        team.url + "/v1/chat/completions",
        timeout=30,
        headers={"Authorization": "Bearer sk-erin-0001", "X-Priority": "high"},
        json={"model": "sim", "messages": [{"role": "user", "content": "x"}], "max_tokens": 4},
    )
    assert asked_high.status_code == 200 and asked_high.headers["x-priority"] == "low"
    assert ask(team, "sk-fay-00001").headers["x-priority"] == "high"  # configured by digest
    assert ask(team, "sk-unknown-01").status_code == 401


def test_usage_adds_up_and_each_key_sees_its_own(team: LiveServer) -> None:
    before = usage(team, "sk-ops-00001", caller="erin").json()["data"][0]
    answers = [ask(team, "sk-erin-0001", max_tokens=5 + i, cache=False).json()["usage"] for i in range(3)]
    ask(team, "sk-erin-0001", max_tokens=5, temperature=0)
    hit = ask(team, "sk-erin-0001", max_tokens=5, temperature=0)
    assert hit.headers["x-cache"] == "HIT"
    mine = usage(team, "sk-erin-0001").json()["data"]
    assert [row["caller"] for row in mine] == ["erin"]
    row = mine[0]
    assert row["requests"] - before["requests"] == 5 and row["cache_hits"] - before["cache_hits"] == 1
    assert row["completion_tokens"] - before["completion_tokens"] == sum(a["completion_tokens"] for a in answers) + 5
    assert row["limits"] == {"rpm": None, "tpm": None, "max_parallel": None, "max_queued": None, "daily_tokens": None}
    assert usage(team, "sk-erin-0001", caller="alice").status_code == 403
    everyone = {row["caller"]: row for row in usage(team, "sk-ops-00001").json()["data"]}
    assert {"alice", "bob", "carol", "dave", "erin", "fay", "ops", "anonymous"} <= set(everyone)
    assert everyone["alice"]["rejections"] >= 1 and everyone["alice"]["limits"]["rpm"] == 3
    later = usage(team, "sk-ops-00001", start_time=time.time() + 120, end_time=time.time() + 180).json()["data"]
    assert all(r["requests"] == 0 for r in later)
    assert usage(team, "sk-ops-00001", start_time=10, end_time=5).status_code == 400


def test_metrics_name_callers_and_never_show_a_key(team: LiveServer) -> None:
    ask(team, "sk-fay-00001")
    assert httpx.get(team.url + "/metrics", timeout=10).status_code == 401
    assert (
        httpx.get(team.url + "/metrics", headers={"Authorization": "Bearer sk-fay-00001"}, timeout=10).status_code
        == 403
    )
    text = httpx.get(team.url + "/metrics", headers={"Authorization": "Bearer sk-ops-00001"}, timeout=10).text
    assert 'gptoss_caller_requests_total{caller="fay"}' in text
    assert 'gptoss_caller_tokens_total{caller="fay",kind="completion"}' in text
    assert not any(secret in text for secret in SECRETS)


def test_a_key_with_the_metrics_role_reads_metrics_and_a_plain_key_does_not(make_server) -> None:
    """What a Prometheus scrape job's `authorization` sends: a key marked `metrics: true`, not an admin."""
    live = make_server("server.keys=[{name: prom, key: sk-prom-00001, metrics: true}, {name: bob, key: sk-bob-00001}]")
    scraped = httpx.get(live.url + "/metrics", headers={"Authorization": "Bearer sk-prom-00001"}, timeout=10)
    assert scraped.status_code == 200 and "gptoss_" in scraped.text
    plain = httpx.get(live.url + "/metrics", headers={"Authorization": "Bearer sk-bob-00001"}, timeout=10)
    assert plain.status_code == 403 and plain.json()["error"]["code"] == "metrics_key_required"


def test_metrics_public_opens_metrics_to_a_call_without_a_key(make_server) -> None:
    live = make_server("server.keys=[{name: bob, key: sk-bob-00001}]", "server.metrics_public=true")
    assert httpx.get(live.url + "/metrics", timeout=10).status_code == 200
    assert httpx.get(live.url + "/v1/models", timeout=10).status_code == 401  # the rest stays closed


def test_max_parallel_holds_extra_requests_and_max_queued_refuses_past_it(make_server) -> None:
    live = make_server(KEYS, "engine.sim.token_latency_ms=20")
    live.status_key = "sk-ops-00001"
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(ask, live, "sk-dave-0001", 100, request_id="d1")
        live.wait_for(lambda s: s["running"] == 1)
        second = pool.submit(ask, live, "sk-dave-0001", 100, request_id="d2")
        live.wait_for(lambda s: s["waiting_total"] == 1)
        assert live.status(request_id="d2", caller="dave")["state"] == "queued"  # the engine has room; dave does not
        third = ask(live, "sk-dave-0001")
        assert third.status_code == 429 and "1 requests waiting" in third.json()["error"]["message"]
        assert third.json()["error"]["code"] == "rate_limit_exceeded"
        assert ask(live, "sk-bob-00001", max_tokens=4).status_code == 200  # others run meanwhile
        assert live.status(request_id="d2", caller="dave")["state"] == "queued"
        assert first.result().status_code == 200 and second.result().status_code == 200
    dave = usage(live, "sk-dave-0001").json()["data"][0]
    assert (dave["requests"], dave["rejections"]) == (3, 1)  # a refusal is counted once


@pytest.mark.parametrize("fair, light_position", [(True, 1), (False, 7)])
def test_fair_share_puts_a_light_user_ahead_of_a_flood(make_server, fair: bool, light_position: int) -> None:
    live = make_server(
        KEYS,
        "scheduler.limit.adaptive=false",
        "scheduler.max_concurrency=1",
        "engine.sim.token_latency_ms=20",
        f"scheduler.fair_share.enabled={str(fair).lower()}",
    )
    live.status_key = "sk-ops-00001"
    with ThreadPoolExecutor(9) as pool:
        flood = [pool.submit(ask, live, "sk-ops-00001", 40, request_id=f"a{i}", cache=False) for i in range(8)]
        live.wait_for(lambda s: s["waiting_total"] == 7)
        light = pool.submit(ask, live, "sk-alice-0001", 40, request_id="light", cache=False)
        live.wait_for(lambda s: s["waiting_total"] == 8)
        assert live.status(request_id="light", caller="alice")["position"] in (light_position, light_position + 1)
        assert light.result().status_code == 200 and all(f.result().status_code == 200 for f in flood)
    waits = {f"a{i}": float(flood[i].result().headers["x-queue-wait-ms"]) for i in range(8)}
    overtaken = sum(wait > float(light.result().headers["x-queue-wait-ms"]) for wait in waits.values())
    assert (overtaken >= 5) is fair
