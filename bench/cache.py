"""Response cache benchmark: hit latency and throughput, the cost a lookup adds to a miss, and the
hit rate on a Zipf-distributed replay, all measured over HTTP against the real server.

    .venv/bin/python bench/cache.py            # about 1-2 minutes on 2 cores
    .venv/bin/python bench/cache.py --quick    # under ~30 s, a smoke run

The server runs in its own process (`python app.py --port P --set ...`) with the zero-latency
simulator and a cache file in a temporary folder, so every millisecond measured is serving cost,
not generation. The client is async httpx with one AsyncClient (one keep-alive connection) per
worker; bench/scheduler.py found that a single shared client distorts the results.

Part 1, hits: one deterministic request (temperature 0, max_tokens 16) is primed into the cache,
  then sent again and again: p50/p99 latency at concurrency 1 and requests per second at
  concurrency 1 and 16. For scale, the same request with `Cache-Control: no-store` (bypass: the
  scheduler and the engine answer it) in alternating rounds.
Part 2, the lookup's cost on a miss: requests with unique prompts, cache on (key, lookup, miss,
  generation, store) against the same kind of request with `Cache-Control: no-store` (no key, no
  lookup, no store), at concurrency 1, in alternating blocks (A B B A ...) so drift hits both
  sides alike. Added p50 = p50(cache on) - p50(no-store). An A/A split of the no-store blocks
  shows the noise floor.
Part 3, hit rate (bench/cache_zipf.py): streams over a catalogue of distinct prompts where 0 %, 20 %, 50 % of requests
  are repeats of a prompt seen earlier in the stream, picked by a Zipf law (s = 1.1) over the
  prompts seen so far in order of first appearance; the rest are fresh. Each stream runs through
  an emptied cache (DELETE /v1/cache); the hit rate measured from X-Cache headers and from the
  GET /v1/cache/stats counters is compared with the exact theoretical rate (the fraction of the
  stream's requests whose prompt appeared earlier in it).

A benchmark, not a test: it prints tables and a PASS/MISS summary, and always exits 0 unless
something failed to run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root first: see bench/common.py

from bench.cache_requests import MAX_TOKENS, api_json, ms, payload, prompt_text  # noqa: E402
from bench.cache_zipf import run_part3  # noqa: E402
from bench.clients import LoadResult, load_row, one_connection_client, repeat_load  # noqa: E402
from bench.common import NO_STORE, SIM_SERVER_SETTINGS, Progress, Stats, note, table  # noqa: E402
from bench.machine import process_cpu_s  # noqa: E402
from bench.servers import app_argv, free_port, running_server  # noqa: E402

HIT_P50_TARGET_MS = 3.0
LOOKUP_ADDED_TARGET_MS = 1.0
SERVER_SETTINGS = SIM_SERVER_SETTINGS


# ----------------------------------------------------------------------------- part 1: hits


async def _prime(url: str, body: dict) -> tuple[str, str]:
    """Send the request twice: the first stores it (MISS), the second must come back a HIT."""
    async with one_connection_client(url) as client:
        statuses = []
        for _ in range(2):
            response = await client.post("/v1/chat/completions", json=body)
            response.raise_for_status()
            statuses.append(response.headers.get("x-cache", "none"))
    return statuses[0], statuses[1]


def run_part1(url: str, pid: int, args: argparse.Namespace, summary: list[list[object]]) -> None:
    warmup = 0.3 if args.quick else 0.5
    duration = 1.0 if args.quick else 6.0
    rounds = 1 if args.quick else 3
    note("Part 1: cache hits (a primed entry) against the same request with no-store")
    body = payload(prompt_text(f"hit-{uuid.uuid4().hex[:8]}", 0))
    first, second = asyncio.run(_prime(url, body))
    if (first, second) != ("MISS", "HIT"):
        raise RuntimeError(f"priming the cache: expected MISS then HIT, got {first} then {second}")
    modes = [("hit", {}), ("no-store", NO_STORE)]
    results: dict[tuple[str, int], LoadResult] = {}
    for c in (1, 16):
        for rnd in range(rounds):
            order = modes if rnd % 2 == 0 else modes[::-1]
            for name, headers in order:
                label = f"{name} c={c} round {rnd + 1}/{rounds}"
                r = asyncio.run(repeat_load(url, pid, body, headers, c, warmup, duration / rounds, label))
                results.setdefault((name, c), LoadResult()).merge(r)

    rows = []
    stats: dict[tuple[str, int], Stats] = {}
    rps: dict[tuple[str, int], float] = {}
    for c in (1, 16):
        for name, _ in modes:
            r = results[(name, c)]
            row, stats[(name, c)], _ = load_row(name, c, r)
            rps[(name, c)] = len(r.latencies_s) / r.wall_s if r.wall_s else 0.0
            rows.append([*row, ", ".join(f"{k}={v:,}" for k, v in sorted(r.cache_status.items()))])
    errors = [f"{name} c={c}: {r.error_sample}" for (name, c), r in results.items() if r.error_sample]
    print()
    print(
        table(
            f"Part 1: cache hits vs the engine path, non-streaming, temperature 0, max_tokens {MAX_TOKENS} "
            "(latency in milliseconds, client-measured)",
            [
                "request",
                "conc",
                "requests",
                "errors",
                "req/s",
                "p50 ms",
                "p99 ms",
                "mean ms",
                "max ms",
                "srv cpu us/req",
                "client cpu",
                "X-Cache",
            ],
            rows,
            [
                "hit: one primed entry sent again; no-store: the same request with Cache-Control: no-store "
                "(scheduler + zero-latency simulator, no key, no lookup)",
                f"{duration:g}s measured per cell after {warmup:g}s warm-up, in {rounds} alternating round(s); "
                f"client and server share {os.cpu_count()} CPUs; client cpu near 100% means req/s is client-bound",
                "srv cpu us/req: server process CPU time (/proc) over the measured window / requests answered",
                *(f"first error: {e}" for e in errors),
            ],
        )
    )
    hit1 = stats[("hit", 1)]
    all_hits = all(
        results[("hit", c)].cache_status.keys() == {"HIT"} and not results[("hit", c)].errors for c in (1, 16)
    )
    summary.append(
        [
            "hit p50 @ concurrency 1",
            f"< {HIT_P50_TARGET_MS:g} ms",
            f"{hit1.p50:.2f} ms",
            "PASS" if hit1.p50 < HIT_P50_TARGET_MS else "MISS",
        ]
    )
    summary.append(["hit p99 @ concurrency 1", "(info)", f"{hit1.p99:.2f} ms", "-"])
    summary.append(
        ["hit req/s @ concurrency 1 / 16", "(info)", f"{rps[('hit', 1)]:,.0f} / {rps[('hit', 16)]:,.0f}", "-"]
    )
    summary.append(
        ["every hit request answered X-Cache: HIT", "yes", "yes" if all_hits else "no", "PASS" if all_hits else "MISS"]
    )


# ----------------------------------------------------------------------------- part 2: lookup cost on a miss


@dataclass
class MissResult:
    latencies_s: dict[str, list[float]] = field(default_factory=lambda: {"on": [], "no-store": []})
    block_latencies_s: dict[str, list[list[float]]] = field(default_factory=lambda: {"on": [], "no-store": []})
    server_cpu_s: dict[str, float | None] = field(default_factory=lambda: {"on": 0.0, "no-store": 0.0})
    wrong_status: dict[str, int] = field(default_factory=lambda: {"on": 0, "no-store": 0})
    errors: int = 0
    error_sample: str = ""


async def _misses(url: str, pid: int, blocks: int, per_block: int, warmup: int, tag: str) -> MissResult:
    """Alternating blocks A B B A ... of unique-prompt requests, cache on vs no-store, one client."""
    import httpx

    result = MissResult()
    expected = {"on": "MISS", "no-store": "BYPASS"}
    counter = 0
    progress = Progress("misses: cache on vs no-store", blocks * 2)
    async with one_connection_client(url) as client:

        async def one(mode: str) -> float | None:
            nonlocal counter
            counter += 1
            headers = NO_STORE if mode == "no-store" else {}
            t0 = time.perf_counter()
            try:
                response = await client.post(
                    "/v1/chat/completions", json=payload(prompt_text(tag, counter)), headers=headers
                )
            except httpx.HTTPError as exc:
                result.errors += 1
                result.error_sample = result.error_sample or repr(exc)
                return None
            dt = time.perf_counter() - t0
            if response.status_code != 200:
                result.errors += 1
                result.error_sample = result.error_sample or f"{response.status_code} {response.text[:200]}"
                return None
            if response.headers.get("x-cache") != expected[mode]:
                result.wrong_status[mode] += 1
            return dt

        for i in range(warmup):
            await one("on" if i % 2 else "no-store")
        for b in range(blocks):
            # A B B A: each mode leads and trails equally often
            order = ("on", "no-store") if b % 2 == 0 else ("no-store", "on")
            for mode in order:
                cpu0 = process_cpu_s(pid)
                block = [dt for dt in [await one(mode) for _ in range(per_block)] if dt is not None]
                cpu1 = process_cpu_s(pid)
                result.latencies_s[mode].extend(block)
                result.block_latencies_s[mode].append(block)
                if cpu0 is None or cpu1 is None or result.server_cpu_s[mode] is None:
                    result.server_cpu_s[mode] = None
                else:
                    result.server_cpu_s[mode] += cpu1 - cpu0
            progress.update((b + 1) * 2)
    progress.done()
    return result


def run_part2(url: str, pid: int, args: argparse.Namespace, summary: list[list[object]]) -> None:
    blocks = 8 if args.quick else 40
    per_block = 40 if args.quick else 60
    note("Part 2: the lookup's cost on a miss (unique prompts, cache on vs no-store, concurrency 1)")
    asyncio.run(api_json(url, "DELETE", "/v1/cache"))
    r = asyncio.run(
        _misses(url, pid, blocks, per_block, warmup=100 if args.quick else 300, tag=f"miss-{uuid.uuid4().hex[:8]}")
    )
    st = {mode: Stats.of(ms(v)) for mode, v in r.latencies_s.items()}
    cpu = {
        mode: (r.server_cpu_s[mode] / st[mode].n * 1e6 if r.server_cpu_s[mode] is not None and st[mode].n else None)
        for mode in st
    }
    # A/A: the no-store blocks split into two halves of alternate blocks, to show the noise floor
    nb = r.block_latencies_s["no-store"]
    aa_a = Stats.of(ms([x for blk in nb[0::2] for x in blk]))
    aa_b = Stats.of(ms([x for blk in nb[1::2] for x in blk]))
    # per-pair block medians: the spread of the added p50 across the run
    pair_diffs = sorted(Stats.of(ms(a)).p50 - Stats.of(ms(b)).p50 for a, b in zip(r.block_latencies_s["on"], nb))
    rows = []
    for mode, label in (("on", "cache on (key, lookup, miss, store)"), ("no-store", "no-store (bypass)")):
        s = st[mode]
        rows.append(
            [
                label,
                f"{s.n:,}",
                f"{s.p50:.3f}",
                f"{s.p99:.3f}",
                f"{s.mean:.3f}",
                f"{s.max:.2f}",
                f"{cpu[mode]:,.0f}" if cpu[mode] is not None else "-",
                r.wrong_status[mode],
            ]
        )
    on, off = st["on"], st["no-store"]
    added = on.p50 - off.p50
    cpu_added = f"{cpu['on'] - cpu['no-store']:+,.0f}" if cpu["on"] is not None and cpu["no-store"] is not None else "-"
    rows.append(
        [
            "  added (on - no-store)",
            "",
            f"{added:+.3f}",
            f"{on.p99 - off.p99:+.3f}",
            f"{on.mean - off.mean:+.3f}",
            "",
            cpu_added,
            "",
        ]
    )
    rows.append(
        [
            "  A/A noise (no-store, even - odd blocks)",
            "",
            f"{aa_a.p50 - aa_b.p50:+.3f}",
            f"{aa_a.p99 - aa_b.p99:+.3f}",
            f"{aa_a.mean - aa_b.mean:+.3f}",
            "",
            "",
            "",
        ]
    )
    q = len(pair_diffs) // 4
    print()
    print(
        table(
            f"Part 2: what the cache adds to a miss, non-streaming, temperature 0, max_tokens {MAX_TOKENS}, "
            "concurrency 1 (milliseconds)",
            ["requests", "n", "p50 ms", "p99 ms", "mean ms", "max ms", "srv cpu us/req", "wrong X-Cache"],
            rows,
            [
                f"{blocks} blocks of {per_block} per side, alternating A B B A ..., every prompt unique "
                "(cache on: each one a MISS that is then stored; no-store: X-Cache BYPASS)",
                f"per-block-pair p50 difference: median {pair_diffs[len(pair_diffs) // 2]:+.3f} ms, "
                f"interquartile {pair_diffs[q]:+.3f} .. {pair_diffs[-q - 1]:+.3f} ms over {len(pair_diffs)} pairs",
                "srv cpu us/req includes the background SQLite insert + commit of each stored miss",
                *([f"first error: {r.error_sample}"] if r.error_sample else []),
            ],
        )
    )
    summary.append(
        [
            "lookup added to a miss, p50 @ c=1",
            f"< {LOOKUP_ADDED_TARGET_MS:g} ms",
            f"{added:+.3f} ms",
            "PASS" if added < LOOKUP_ADDED_TARGET_MS else "MISS",
        ]
    )
    summary.append(["  server CPU added per miss", "(info)", f"{cpu_added} us", "-"])
    wrong = sum(r.wrong_status.values()) + r.errors
    summary.append(["misses: errors + wrong X-Cache", "0", str(wrong), "PASS" if wrong == 0 else "MISS"])


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/cache.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a short run, under ~30 s")
    p.add_argument("--skip-hits", action="store_true", help="skip part 1 (hit latency and throughput)")
    p.add_argument("--skip-misses", action="store_true", help="skip part 2 (the lookup's cost on a miss)")
    p.add_argument("--skip-zipf", action="store_true", help="skip part 3 (Zipf replay hit rates)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import httpx
    import uvicorn

    started = time.monotonic()
    print(
        f"bench/cache.py  mode={'quick' if args.quick else 'full'}  python {platform.python_version()}  "
        f"uvicorn {uvicorn.__version__}  httpx {httpx.__version__}  cpus={os.cpu_count()}  {platform.machine()}"
    )
    summary: list[list[object]] = []
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as tmp:
        settings = [*SERVER_SETTINGS, f"cache.path={Path(tmp) / 'cache.sqlite3'}"]
        with running_server("ours", app_argv(port, settings), port) as server:
            url, pid = server.url, server.pid
            stats = asyncio.run(api_json(url, "GET", "/v1/cache/stats"))
            if not stats.get("enabled"):
                raise RuntimeError(f"the server's cache is not enabled: {stats}")
            if not args.skip_hits:
                run_part1(url, pid, args, summary)
            if not args.skip_misses:
                run_part2(url, pid, args, summary)
            if not args.skip_zipf:
                run_part3(url, args, summary)
    print()
    print(
        table(
            "Summary",
            ["target", "goal", "measured", "result"],
            summary,
            [
                f"server: python app.py {' '.join('--set ' + s for s in SERVER_SETTINGS)} "
                "--set cache.path=<tempdir>/cache.sqlite3",
                f"total run time {time.monotonic() - started:.1f}s",
            ],
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
