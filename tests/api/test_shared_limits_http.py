"""Rate limits and usage counted across two gateways (two real servers of ours) through a real Redis."""

from __future__ import annotations

import secrets
import time

import httpx

from tests.conftest import live_server


def ask(url: str, key: str) -> httpx.Response:
    return httpx.post(
        url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
        json={"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    )


def test_rpm_holds_across_gateways(redis_url: str) -> None:
    name, key = f"team-{secrets.token_hex(4)}", f"sk-{secrets.token_hex(8)}"
    settings = (
        f"server.keys=[{{name: {name}, key: {key}, rpm: 3, daily_tokens: 100000}}]",
        "state.shared_limits=true",
        f"state.redis_url={redis_url}",
        "state.sync_interval_s=0.05",
    )
    with live_server(*settings) as a, live_server(*settings) as b:
        assert ask(a.url, key).status_code == 200 and ask(a.url, key).status_code == 200
        time.sleep(0.3)  # a few syncs
        third = ask(b.url, key)
        assert third.status_code == 200 and third.headers["x-ratelimit-remaining-requests"] == "0"
        time.sleep(0.3)
        refused = ask(a.url, key)
        assert refused.status_code == 429 and "3 requests per minute" in refused.json()["error"]["message"]
        assert ask(b.url, key).status_code == 429
        spent = b.services.pipeline.limiter.day_tokens(name)
        assert spent >= 3 * 4  # both gateways' tokens, as B sees them


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
        return next(row for row in r.json()["data"] if row["caller"] == name)

    with live_server(*settings) as a, live_server(*settings) as b:
        answers = [ask(a.url, key), ask(b.url, key)]
        assert all(r.status_code == 200 for r in answers)
        tokens = sum(r.json()["usage"]["completion_tokens"] for r in answers)
        time.sleep(0.4)  # a few syncs
        for gateway in (a, b):
            row = usage(gateway.url)
            assert row["requests"] == 2 and row["completion_tokens"] == tokens
    with live_server(*settings) as restarted:  # the figures outlive the gateways
        time.sleep(0.3)
        assert usage(restarted.url)["requests"] == 2
