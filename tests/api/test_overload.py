"""Past capacity, with the high class alone over it: whoever the door accepts is served. A refusal
comes as a 429 with Retry-After before any byte of a stream; an accepted stream never ends in a
queue error (displaced or timed out) after its 200."""

from __future__ import annotations

import asyncio
import json
import random

import httpx

from tests.conftest import live_server

RATE_PER_S, SECONDS = 125, 8  # ten times capacity: 8 slots, 32 tokens of 20 ms, about 12.5 req/s
CLASSES = ("high", "medium", "low")


async def one(client: httpx.AsyncClient, cls: str, stream: bool) -> tuple[str, int, str | None, bool]:
    """(class, status, error code in the stream or body, whether a 429 had Retry-After)."""
    body = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 32, "stream": stream}
    async with client.stream("POST", "/v1/chat/completions", json=body, headers={"X-Priority": cls}) as response:
        raw = (await response.aread()).decode()
    if response.status_code != 200:
        return cls, response.status_code, json.loads(raw)["error"]["code"], "retry-after" in response.headers
    if not stream:
        return cls, 200, None, False
    errors = [json.loads(line[6:])["error"]["code"] for line in raw.splitlines() if line.startswith('data: {"error"')]
    done = "data: [DONE]" in raw
    return cls, 200, errors[0] if errors else (None if done else "incomplete"), False


async def flood(url: str) -> list[tuple[str, int, str | None, bool]]:
    rng = random.Random(3)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=httpx.Limits(max_connections=None)) as client:
        tasks = []
        for i in range(RATE_PER_S * SECONDS):
            tasks.append(asyncio.create_task(one(client, CLASSES[i % 3], stream=i % 2 == 0)))
            await asyncio.sleep(rng.expovariate(RATE_PER_S))
        return await asyncio.gather(*tasks)


def test_at_ten_times_capacity_accepted_means_served() -> None:
    with live_server(
        "scheduler.max_concurrency=8",
        "scheduler.limit.adaptive=false",
        "engine.sim.token_latency_ms=20",
        "scheduler.max_queue_size=64",
        "scheduler.max_wait_s.high=10",
        "scheduler.max_wait_s.medium=6",
        "scheduler.max_wait_s.low=4",
    ) as live:
        results = asyncio.run(flood(live.url))
    served = [r for r in results if r[1] == 200 and r[2] is None]
    failed_after_200 = [r for r in results if r[1] == 200 and r[2] is not None]
    refused = [r for r in results if r[1] != 200]
    assert not failed_after_200, failed_after_200[:5]
    assert all(status == 429 and retry for _, status, _, retry in refused), refused[:5]
    assert refused and len(served) > 50  # over capacity: some refused, the engine kept busy
    assert any(r[0] == "high" for r in served)
