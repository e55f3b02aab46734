"""Part 3 of bench/cache.py: the hit rate on a Zipf-distributed replay, measured from X-Cache
headers and the cache's counters, against the exact theoretical rate (the docstring of
bench/cache.py has the method)."""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import random
import time
import uuid
from dataclasses import dataclass

from bench.cache_requests import MAX_TOKENS, api_json, payload, prompt_text
from bench.clients import one_connection_client
from bench.common import Progress, note, table

ZIPF_S = 1.1
REPEAT_FRACTIONS = (0.0, 0.2, 0.5)


@dataclass
class ZipfStream:
    repeat_fraction: float
    prompts: list[int]  # catalogue indices, in request order
    theoretical_hits: int
    distinct: int


def make_stream(n: int, repeat_fraction: float, rng: random.Random, cum: list[float]) -> ZipfStream:
    """Each request is, with probability repeat_fraction, a repeat of a prompt seen earlier, rank k
    (k-th distinct prompt in order of first appearance) drawn with weight k^-s; else the next fresh
    prompt from the catalogue. The first request is always fresh."""
    seen: list[int] = []
    prompts = []
    for _ in range(n):
        if seen and rng.random() < repeat_fraction:
            k = bisect.bisect_left(cum, rng.random() * cum[len(seen) - 1], 0, len(seen))
            prompts.append(seen[min(k, len(seen) - 1)])
        else:
            seen.append(len(seen))  # the catalogue's next prompt
            prompts.append(seen[-1])
    # The theoretical hit count, straight from the stream: requests whose prompt appeared before.
    before: set[int] = set()
    hits = 0
    for p in prompts:
        hits += p in before
        before.add(p)
    return ZipfStream(repeat_fraction, prompts, hits, len(before))


def zipf_cumulative(n: int, s: float) -> list[float]:
    cum, total = [], 0.0
    for k in range(1, n + 1):
        total += k**-s
        cum.append(total)
    return cum


@dataclass
class ReplayResult:
    statuses: list[str]
    wall_s: float
    removed_before: int
    stats_before: dict
    stats_after: dict
    errors: int = 0
    error_sample: str = ""


async def _replay(url: str, stream: ZipfStream, tag: str, concurrency: int, label: str) -> ReplayResult:
    import httpx

    removed = (await api_json(url, "DELETE", "/v1/cache"))["removed"]
    stats_before = await api_json(url, "GET", "/v1/cache/stats")
    statuses = [""] * len(stream.prompts)
    errors, sample = 0, ""
    next_index = 0
    progress = Progress(label, len(stream.prompts))

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal next_index, errors, sample
        while next_index < len(stream.prompts):
            i = next_index
            next_index += 1
            try:
                response = await client.post("/v1/chat/completions", json=payload(prompt_text(tag, stream.prompts[i])))
                statuses[i] = response.headers.get("x-cache", "none") if response.status_code == 200 else "error"
                if response.status_code != 200:
                    errors += 1
                    sample = sample or f"{response.status_code} {response.text[:200]}"
            except httpx.HTTPError as exc:
                statuses[i] = "error"
                errors += 1
                sample = sample or repr(exc)
            if i % 200 == 0:
                progress.update(i)

    clients = [one_connection_client(url) for _ in range(concurrency)]
    async with contextlib.AsyncExitStack() as stack:
        for client in clients:
            await stack.enter_async_context(client)
        start = time.perf_counter()
        await asyncio.gather(*(worker(c) for c in clients))
        wall = time.perf_counter() - start
    progress.done()
    stats_after = await api_json(url, "GET", "/v1/cache/stats")
    return ReplayResult(statuses, wall, removed, stats_before, stats_after, errors, sample)


def run_part3(url: str, args: argparse.Namespace, summary: list[list[object]]) -> None:
    n = 500 if args.quick else 3000
    concurrencies = (1, 8)
    note(f"Part 3: Zipf replay (s={ZIPF_S}), {n:,} requests per stream, each through an emptied cache")
    rng = random.Random(2024)
    cum = zipf_cumulative(n, ZIPF_S)
    streams = [make_stream(n, f, rng, cum) for f in REPEAT_FRACTIONS]
    rows = []
    worst_gap = 0.0
    removed_seen: list[int] = []
    errors: list[str] = []
    for c in concurrencies:
        for stream in streams:
            tag = f"zipf-{uuid.uuid4().hex[:8]}"
            r = asyncio.run(_replay(url, stream, tag, c, f"replay {stream.repeat_fraction:.0%} repeats c={c}"))
            removed_seen.append(r.removed_before)
            theory = stream.theoretical_hits / n
            hdr_hits = r.statuses.count("HIT")
            hdr_other = sum(1 for s in r.statuses if s not in ("HIT", "MISS"))
            d_hits = r.stats_after["hits"] - r.stats_before["hits"]
            d_misses = r.stats_after["misses"] - r.stats_before["misses"]
            lookups = d_hits + d_misses
            stats_rate = d_hits / lookups if lookups else 0.0
            hdr_rate = hdr_hits / n
            worst_gap = max(worst_gap, abs(hdr_rate - theory))
            rows.append(
                [
                    f"{stream.repeat_fraction:.0%}",
                    c,
                    f"{n:,}",
                    f"{stream.distinct:,}",
                    f"{theory:.2%}",
                    f"{hdr_rate:.2%}",
                    f"{hdr_rate - theory:+.2%}",
                    f"{stats_rate:.2%}",
                    f"{d_hits:,}/{lookups:,}",
                    f"{r.stats_after['entries']:,}",
                    f"{r.removed_before:,}",
                    hdr_other,
                    f"{n / r.wall_s:,.0f}",
                ]
            )
            if r.error_sample:
                errors.append(f"{stream.repeat_fraction:.0%} c={c}: {r.error_sample}")
    top = [k**-ZIPF_S / cum[-1] for k in (1, 2, 3)]
    print()
    print(
        table(
            f"Part 3: hit rate on a Zipf replay (s={ZIPF_S}), non-streaming, temperature 0, max_tokens {MAX_TOKENS}",
            [
                "repeats",
                "conc",
                "requests",
                "distinct",
                "theory",
                "X-Cache HIT",
                "diff",
                "stats rate",
                "stats hits/lookups",
                "entries",
                "removed before",
                "errors",
                "req/s",
            ],
            rows,
            [
                "theory: fraction of the stream's requests whose prompt appeared earlier in the same stream, "
                "counted from the generated stream",
                "X-Cache HIT: responses with X-Cache: HIT / requests; stats: GET /v1/cache/stats hits and misses "
                "after minus before the stream",
                f"repeats pick the k-th distinct prompt seen so far with weight k^-{ZIPF_S} (over {n:,} ranks "
                f"the top three hold {top[0]:.0%}, {top[1]:.0%}, {top[2]:.0%}); the same three streams at each "
                "concurrency",
                "at concurrency > 1 a repeat may arrive while its first request is still generating: single flight "
                "answers it, and both X-Cache and the stats count it as a hit",
                "removed before: what DELETE /v1/cache returned just before the stream (the previous stream's entries)",
                *(f"first error: {e}" for e in errors),
            ],
        )
    )
    summary.append(
        [
            "Zipf replay: |X-Cache hit rate - theory|",
            "0.00%",
            f"{worst_gap:.2%}",
            "PASS" if worst_gap < 0.00005 else "MISS",
        ]
    )
