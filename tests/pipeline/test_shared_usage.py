"""Usage minutes shared through a real Redis: every gateway's figures, counted once, kept."""

from __future__ import annotations

import asyncio
import secrets

from redis.asyncio import Redis

from pipeline.shared_usage import PREFIX, SharedUsage
from pipeline.usage import UsageLedger, UsageTotals

NOW = 1_800_000_000.0  # a fixed minute, so pushes and reads land in the same one


def gateway(url: str, clock: list[float]) -> UsageLedger:
    return UsageLedger(clock=lambda: clock[0], shared=SharedUsage(url))


async def connected(ledger: UsageLedger) -> SharedUsage:
    shared = ledger.shared
    assert shared is not None
    shared._redis = Redis.from_url(shared.url)
    return shared


def test_each_gateway_reports_every_gateways_figures_once(redis_url: str) -> None:
    async def scenario() -> None:
        url = await fresh_db(redis_url)
        clock = [NOW]
        a, b = gateway(url, clock), gateway(url, clock)
        sa, sb = await connected(a), await connected(b)
        a.record("team", UsageTotals(requests=1, prompt_tokens=10, completion_tokens=5, queue_wait_s=0.25))
        b.record("team", UsageTotals(requests=1, prompt_tokens=20, completion_tokens=7))
        b.record("bob", UsageTotals(requests=1, rejections=1))
        for _ in range(3):  # syncing again must not count anything twice
            await sa.sync(a)
            await sb.sync(b)
        for ledger in (a, b):
            report = ledger.report(NOW - 60, NOW + 1)
            assert report["team"] == UsageTotals(requests=2, prompt_tokens=30, completion_tokens=12, queue_wait_s=0.25)
            assert report["bob"] == UsageTotals(requests=1, rejections=1)
        assert a.lifetime["team"].requests == 1  # /metrics counts this gateway only

        a.record("team", UsageTotals(requests=1))  # recorded here, not yet pushed: shown here at once
        assert a.report(NOW - 60, NOW + 1)["team"].requests == 3
        await sb.sync(b)
        assert b.report(NOW - 60, NOW + 1)["team"].requests == 2
        await sa.sync(a)
        await sb.sync(b)
        assert b.report(NOW - 60, NOW + 1)["team"].requests == 3

        late = gateway(url, clock)  # a gateway started later (or restarted) reads the history back
        await (await connected(late)).sync(late, everything=True)
        assert late.report(NOW - 60, NOW + 1)["team"].requests == 3
        for shared in (sa, sb, late.shared):
            await shared._redis.aclose()

    asyncio.run(scenario())


def test_a_redis_outage_keeps_figures_here_and_pushes_them_later(redis_url: str) -> None:
    async def scenario() -> None:
        url = await fresh_db(redis_url)
        clock = [NOW]
        down = UsageLedger(clock=lambda: clock[0], shared=SharedUsage("redis://127.0.0.1:1/0"))
        shared = await connected(down)
        down.record("team", UsageTotals(requests=2))
        await shared.sync(down)
        assert shared.errors == 1 and down.report(NOW - 60, NOW + 1)["team"].requests == 2
        await shared._redis.aclose()
        shared._redis = Redis.from_url(url)  # Redis is back
        await shared.sync(down)
        other = gateway(url, clock)
        await (await connected(other)).sync(other, everything=True)
        assert other.report(NOW - 60, NOW + 1)["team"].requests == 2
        await shared._redis.aclose()
        await other.shared._redis.aclose()

    asyncio.run(scenario())


async def fresh_db(redis_url: str) -> str:
    """A database of its own on the shared test Redis, empty of usage keys."""
    url = redis_url.rsplit("/", 1)[0] + f"/{2 + secrets.randbelow(12)}"
    redis = Redis.from_url(url)
    keys = [key async for key in redis.scan_iter(f"{PREFIX}*")]
    if keys:
        await redis.delete(*keys)
    await redis.aclose()
    return url
