"""Rate limits and usage counted across two gateways (two real servers of ours) through a real Redis."""

from __future__ import annotations

import secrets
import time

import httpx

from tests.conftest import live_server


def synced(live, name: str, kind: str, at_least: int, timeout_s: float = 10) -> None:
    """Waits until this gateway reads `at_least` of `kind` for `name` from Redis (a sync or more)."""
    tally = live.services.pipeline.limiter.shared
    deadline = time.monotonic() + timeout_s
    while tally.used(name, kind, 0) < at_least:
        assert time.monotonic() < deadline, f"{kind} never reached {at_least}"
        time.sleep(0.02)


def ask(url: str, key: str) -> httpx.Response:
    return httpx.post(
        url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
        json={"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    )


def gateways(redis_url: str, limits: str) -> tuple[str, str, tuple[str, ...]]:
    """A fresh caller's name and key, and the settings of a gateway sharing its limits on Redis."""
    name, key = f"team-{secrets.token_hex(4)}", f"sk-{secrets.token_hex(8)}"
    settings = (
        f"server.keys=[{{name: {name}, key: {key}, {limits}}}]",
        "state.shared_limits=true",
        f"state.redis_url={redis_url}",
        "state.sync_interval_s=0.05",
    )
    return name, key, settings


def test_rpm_holds_across_gateways(redis_url: str) -> None:
    name, key, settings = gateways(redis_url, "rpm: 3, daily_tokens: 100000")
    with live_server(*settings) as a, live_server(*settings) as b:
        assert ask(a.url, key).status_code == 200 and ask(a.url, key).status_code == 200
        synced(b, name, "requests", 2)
        third = ask(b.url, key)
        assert third.status_code == 200 and third.headers["x-ratelimit-remaining-requests"] == "0"
        synced(a, name, "requests", 3)
        refused = ask(a.url, key)
        assert refused.status_code == 429 and "3 requests per minute" in refused.json()["error"]["message"]
        assert ask(b.url, key).status_code == 429
        spent = b.services.pipeline.limiter.day_tokens(name)
        assert spent >= 3 * 4  # both gateways' tokens, as B sees them


def test_token_counts_hold_across_gateways(redis_url: str) -> None:
    name, key, settings = gateways(redis_url, "rpm: 1")
    count = {"messages": [{"role": "user", "content": "hi"}]}
    with live_server(*settings) as a, live_server(*settings) as b:
        auth = {"Authorization": f"Bearer {key}"}
        assert httpx.post(a.url + "/tokenize", json=count, headers=auth).status_code == 200
        synced(b, name, "counts", 1)
        assert httpx.post(b.url + "/tokenize", json=count, headers=auth).status_code == 429
        assert ask(b.url, key).status_code == 200  # the requests' window is another


def test_without_redis_each_gateway_counts_alone() -> None:
    settings = ("server.keys=[{name: solo, key: sk-solo-0001, rpm: 1}]",)
    with live_server(*settings) as a, live_server(*settings) as b:
        assert ask(a.url, "sk-solo-0001").status_code == 200
        assert ask(b.url, "sk-solo-0001").status_code == 200
        assert ask(a.url, "sk-solo-0001").status_code == 429


def test_usage_counts_every_gateway(redis_url: str) -> None:
    name, key = f"team-{secrets.token_hex(4)}", f"sk-{secrets.token_hex(8)}"
    settings = (
        f"server.keys=[{{name: {name}, key: {key}}}]",
        "state.shared_usage=true",
        f"state.redis_url={redis_url}",
        "state.sync_interval_s=0.05",
    )

    def usage(url: str) -> dict:
        r = httpx.get(url + "/v1/usage", headers={"Authorization": f"Bearer {key}"}, timeout=10)
        assert r.status_code == 200
        return next((row for row in r.json()["data"] if row["caller"] == name), {"requests": 0})

    def usage_once(url: str, requests: int, timeout_s: float = 10) -> dict:
        """The row once it counts `requests` (a sync or more), or as it stands at the deadline."""
        deadline = time.monotonic() + timeout_s
        while (row := usage(url))["requests"] < requests and time.monotonic() < deadline:
            time.sleep(0.05)
        return row

    with live_server(*settings) as a, live_server(*settings) as b:
        answers = [ask(a.url, key), ask(b.url, key)]
        assert all(r.status_code == 200 for r in answers)
        tokens = sum(r.json()["usage"]["completion_tokens"] for r in answers)
        for gateway in (a, b):
            row = usage_once(gateway.url, 2)
            assert row["requests"] == 2 and row["completion_tokens"] == tokens
    with live_server(*settings) as restarted:  # the figures outlive the gateways
        assert usage_once(restarted.url, 2)["requests"] == 2
