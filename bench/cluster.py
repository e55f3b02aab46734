"""Several servers behind one gateway (`engine.backend: openai`, engine/openai_upstream.py): does
throughput grow with the upstreams, does prefix affinity keep a prompt on one upstream, does a dead
upstream cost the clients nothing that had not started, and is a shared Redis cache shared?

    .venv/bin/python bench/cluster.py                                  # about 4 minutes on 2 cores
    .venv/bin/python bench/cluster.py --markdown docs/BENCHMARKS.md --json /tmp/cluster.json

One machine, simulator only. The upstreams are our own server on the simulator engine, each with a
fixed running limit (`scheduler.limit.adaptive=false`, max_concurrency 8) and answers of exactly
32 tokens at 50 ms a step (`engine.sim.natural_stop=false`), so one upstream's capacity C1 =
8 / (32 x step) is known; it is also measured, closed loop against one upstream, and the measured
figure sets the rates. The gateway runs at most 8 x N requests (fixed limit), so the upstreams,
not the gateway's own limit, are the bottleneck; it sends no `priority` down (our server reads that
field differently from vLLM). Phases, 3 upstreams started once, a fresh gateway for each run:
(1) N = 1, 2, 3 upstreams, then 3 with prefix affinity off: Poisson open loop at 1.5 x N x C1 for
--duration s, streaming, 20 % high / 80 % low (X-Priority); completed req/s over the last 3/4 of the
sending window, TTFT per class, each upstream's share from its `gptoss_requests_admitted_total`, and
how many requests waited in an upstream's own queue (its log's finish lines); (2) prefix affinity, 3 upstreams
at 0.6 x capacity: 4 system prompts, each either with varying first user messages or as
conversations that share their first user message, affinity on and off; which upstream served a
request comes from its log (X-Request-ID is passed down); (3) failover, 2 upstreams at 0.6 x
capacity, health checks every 0.5 s: one upstream SIGKILLed after a third of the run and restarted
after two thirds; client errors before and after the first token, and the gateway's own log lines
("taken out", "is back") timed against the kill and the restart (an upstream is taken out after
eject_after = 2 failures in a row, of requests or checks: here the streams the kill broke); (4) two
gateways on one upstream sharing a Redis cache (a redis-server started here): the same temperature-0
request to A then B, then a new one to both at once (the upstream's admitted counter says how often
it was generated).

A benchmark, not a test: exit 0 unless something failed to run (1), 130 on Ctrl-C. Every process
started here is stopped (SIGINT, then SIGKILL to its process group). The processes, requests and
sending loops are in bench/cluster_rig.py; this file holds the four phases and their tables.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import sys
import time
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root first: see bench/common.py

from bench.cluster_rig import (  # noqa: E402
    LIMIT,
    MAX_TOKENS,
    TOKEN_MS,
    Record,
    admitted,
    affinity_messages,
    closed_loop,
    gateway,
    one_round,
    open_loop,
    redis_server,
    request,
    shares,
    upstream_process,
)
from bench.common import PROMPTS, Stats, git_head, note, stop_on_sigterm  # noqa: E402
from bench.load_requests import make_plan, prompt_for  # noqa: E402
from bench.machine import system_busy_s  # noqa: E402
from bench.report import Table, check_row, ms, num, write_json, write_section  # noqa: E402
from bench.servers import ServerProcess  # noqa: E402

LOAD, AFFINITY_LOAD, FAILOVER_LOAD = 1.5, 0.6, 0.6  # x the capacity of the upstreams in use
HEALTH_S = 0.5  # the gateway's health and metrics interval in the failover run
SECTION = "## Cluster"
LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) WARNING .*upstream (\S+) (taken out|is back)", re.M)


# ----------------------------------------------------------------------------- phases


def upstream_waits(upstreams: list[ServerProcess]) -> dict[str, float]:
    """Request id -> seconds it waited in an upstream's own queue, from the upstreams' finish lines."""
    return {
        rid: float(wait)
        for u in upstreams
        for rid, wait in re.findall(r" id=(\S+) .*? wait=([0-9.]+)s", Path(u.log.name).read_text())
    }


def scaling(
    upstreams: list[ServerProcess], c1: float, args: argparse.Namespace, runs: dict[str, list[Record]]
) -> tuple[Table, list[float]]:
    """N = 1, 2, 3 with the gateway's defaults, then 3 with prefix affinity off (unique prompts)."""
    rows: list[list[object]] = []
    rates: list[float] = []
    window = (args.duration / 4, args.duration)
    for n, tag, extra in ((1, "", []), (2, "", []), (3, "", []), (3, "off", ["engine.openai.prefix_affinity=false"])):
        rate, name = LOAD * n * c1, f"{n}{', affinity off' if tag else ''}"
        with gateway(upstreams[:n], [*args.gateway_set, *extra]) as gw:
            before, busy, wall_s = admitted(upstreams[:n]), system_busy_s(), time.monotonic()
            recs = runs[f"N={name}"] = asyncio.run(
                open_loop(
                    gw.url,
                    make_plan(args.seed, rate, args.duration),
                    f"N={name}, {rate:.1f} req/s",
                    lambda p, prefix=f"n{n}{tag}-": request(f"{prefix}{p.index}", p.cls, prompt_for(p.index)),
                )
            )
            after, busy, wall_s = admitted(upstreams[:n]), system_busy_s() - busy, time.monotonic() - wall_s
        ok, waits = [r for r in recs if not r.error], upstream_waits(upstreams)
        queued = [waits[r.id] for r in recs if waits.get(r.id, 0) > 0.005]
        rates.append(sum(window[0] <= r.ended_s <= window[1] for r in ok) / (window[1] - window[0]))
        high, low = (Stats.of([r.ttft_s for r in ok if r.cls == c]) for c in ("high", "low"))
        rows.append(
            [
                name,
                f"{rate:.2f}",
                f"{len(ok)}/{len(recs)}",
                f"{rates[-1]:.2f}",
                num(rates[-1] / (n * rates[0])),
                f"{ms(high.p50)} / {ms(high.p99)}",
                f"{ms(low.p50)} / {ms(low.p99)}",
                shares([b - a for a, b in zip(before, after)]),
                f"{100 * len(queued) / len(recs):.0f} %, {ms(max(queued, default=0.0))}",
                f"{100 * busy / wall_s / (os.cpu_count() or 1):.0f} %",
            ]
        )
    return Table(
        f"Throughput by upstream count, open loop at {LOAD:g} x N x C1 (C1 = {c1:.2f} req/s)",
        [
            "upstreams N",
            "offered req/s",
            "done/sent",
            "completed req/s",
            "/ (N x N=1)",
            "high TTFT p50 / p99 ms",
            "low TTFT p50 / p99 ms",
            "share per upstream",
            "queued upstream, max ms",
            "CPU busy",
        ],
        rows,
        [
            f"completed req/s: answers that ended in the last 3/4 of the {args.duration:g} s sending window, "
            "over that time (the first quarter is the ramp)",
            "share: each upstream's gptoss_requests_admitted_total over the run",
            f"queued upstream: requests that waited over 5 ms in an upstream's own queue (all {LIMIT} running "
            "there), from the upstreams' logs, and the longest such wait. Every prompt here is unique, so "
            "prefix affinity (on by default) sends each request to a random upstream, held there only while "
            f"it has a free slot of its {LIMIT} (engine.openai.slots_per_upstream) and at most an eighth of "
            "them more than the least loaded: compare the affinity off row",
            f"CPU busy: the whole machine ({os.cpu_count()} CPUs, client and every server) while the run lasted",
        ],
    ), rates


def affinity(
    upstreams: list[ServerProcess], c1: float, args: argparse.Namespace, runs: dict[str, list[Record]]
) -> Table:
    duration = max(8.0, args.duration / 2)
    plan = make_plan(args.seed + 1, AFFINITY_LOAD * len(upstreams) * c1, duration)
    rows: list[list[object]] = []
    for on in (True, False):
        name = f"affinity {'on' if on else 'off'}"
        with gateway(upstreams, [*args.gateway_set, f"engine.openai.prefix_affinity={str(on).lower()}"]) as gw:
            runs[name] = asyncio.run(
                open_loop(
                    gw.url,
                    plan,
                    name,
                    lambda p, tag=name[9:]: request(
                        f"aff{tag}-{affinity_messages(p.index)[0]}-{p.index}", p.cls, affinity_messages(p.index)[1]
                    ),
                )
            )
        served = {
            rid: i for i, u in enumerate(upstreams) for rid in re.findall(r" id=(aff\S+)", Path(u.log.name).read_text())
        }
        for kind in ("system", "conversation"):
            counts: dict[str, list[int]] = {}
            for rid in (r.id for r in runs[name] if f"-{kind}" in r.id and r.id in served):
                counts.setdefault(rid.split("-")[1], [0] * len(upstreams))[served[rid]] += 1
            total = sum(map(sum, counts.values()))
            rows.append(
                [
                    name if kind == "system" else "",
                    kind,
                    total,
                    num(sum(map(max, counts.values())) / total if total else float("nan")),
                    shares([sum(c[i] for c in counts.values()) for i in range(len(upstreams))]),
                ]
            )
    return Table(
        f"Prefix affinity, {len(upstreams)} upstreams at {AFFINITY_LOAD:g} x capacity, {duration:g} s",
        ["gateway", "workload", "requests", "on its group's most-used upstream", "share per upstream"],
        rows,
        [
            "system: 4 system prompts, each request with its own first user message; conversation: 4 "
            "conversations (system prompt and first user message shared), each request a new turn",
            "1.00 = every request of a group on one upstream; the upstream from its log (X-Request-ID)",
        ],
    )


def wall(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()  # the gateway logs local time


def failover(
    upstreams: list[ServerProcess], c1: float, args: argparse.Namespace, runs: dict[str, list[Record]]
) -> tuple[Table, int]:
    pair, victim = upstreams[:2], upstreams[1]
    duration = args.duration * 1.5
    times: dict[str, float] = {}

    async def chaos(t0: float) -> None:
        await asyncio.sleep(t0 + duration / 3 - time.perf_counter())
        times["kill"], times["kill_s"] = time.time(), time.perf_counter() - t0
        os.killpg(victim.pid, signal.SIGKILL)
        await asyncio.to_thread(victim.proc.wait)  # type: ignore[union-attr]
        await asyncio.sleep(t0 + 2 * duration / 3 - time.perf_counter())
        times["restart"], times["restart_s"] = time.time(), time.perf_counter() - t0
        victim.start()  # the same port, so the gateway's configured URL is valid again
        await asyncio.to_thread(victim.wait_ready)
        times["ready"] = time.time()

    extra = [
        *args.gateway_set,
        f"engine.openai.health_interval_s={HEALTH_S:g}",
        f"engine.openai.metrics_interval_s={HEALTH_S:g}",
    ]
    with gateway(pair, extra) as gw:
        recs = runs["failover"] = asyncio.run(
            open_loop(
                gw.url,
                make_plan(args.seed + 2, FAILOVER_LOAD * 2 * c1, duration),
                "failover",
                lambda p: request(f"fo-{p.index}", p.cls, prompt_for(p.index)),
                chaos,
            )
        )
        log = Path(gw.log.name).read_text()
    events = [(wall(t), what) for t, url, what in LOG_LINE.findall(log) if url == f"{victim.url}/v1"]
    # log stamps are truncated to the millisecond
    out = next((t for t, what in events if what == "taken out" and t > times["kill"] - 0.001), float("nan"))
    back = next((t for t, what in events if what == "is back" and t > times["restart"] - 0.001), float("nan"))
    before = [r for r in recs if r.error and not r.started]
    after = [r for r in recs if r.error and r.started]
    rows: list[list[object]] = [
        ["requests done / sent", f"{sum(not r.error for r in recs)}/{len(recs)}"],
        ["upstream killed, restarted at (s into the run)", f"{times['kill_s']:.1f}, {times['restart_s']:.1f}"],
        ["client errors before the first token", len(before)],
        ["client errors after tokens had flowed (streams on the killed upstream)", len(after)],
        ["kill to 'taken out' in the gateway log, ms", ms(out - times["kill"])],
        [
            "restart to 'is back' (upstream healthy after), ms",
            f"{ms(back - times['restart'])} ({ms(times['ready'] - times['restart'])})",
        ],
        ["healthy to 'is back', ms", ms(back - times["ready"])],
    ]
    notes = [
        f"2 upstreams at {FAILOVER_LOAD:g} x capacity for {duration:g} s; gateway health and metrics every "
        f"{HEALTH_S:g} s (engine.openai.health_interval_s, metrics_interval_s), eject_after 2, retries 2",
        *(f"error: {r.id}{' after tokens' if r.started else ''}: {r.error[:150]}" for r in (before + after)[:4]),
    ]
    return Table("Failover: one of two upstreams SIGKILLed, then restarted", ["", "measured"], rows, notes), len(before)


def shared_cache(upstream: ServerProcess, args: argparse.Namespace) -> tuple[Table, list[str], float]:
    with contextlib.ExitStack() as stack:
        extra = [
            *args.gateway_set,
            "cache.enabled=true",
            "cache.backend=redis",
            f"state.redis_url=redis://127.0.0.1:{stack.enter_context(redis_server())}/0",
        ]
        a, b = (stack.enter_context(gateway([upstream], extra, name)) for name in ("gateway-A", "gateway-B"))
        ask = [f"Question one: {PROMPTS[0]}", f"Question two: {PROMPTS[1]}"]
        start = admitted([upstream])[0]
        first = [
            asyncio.run(one_round([(gw.url, request(f"redis-{gw.name}", "high", ask[0], 0.0))]))[0] for gw in (a, b)
        ]
        middle = admitted([upstream])[0]
        together = asyncio.run(one_round([(gw.url, request(f"both-{gw.name}", "high", ask[1], 0.0)) for gw in (a, b)]))
        end = admitted([upstream])[0]
    cache = [r.headers.get("x-cache", "none") for r in first]
    rows = [
        ["one question to A, then to B", " then ".join(cache), f"{middle - start:g}"],
        [
            "another question to A and B at once",
            " and ".join(r.headers.get("x-cache", "none") for r in together),
            f"{end - middle:g}",
        ],
    ]
    return (
        Table(
            "Two gateways sharing a Redis cache, one upstream",
            ["", "X-Cache (A, B)", "generated upstream"],
            rows,
            [
                "generated upstream: the upstream's gptoss_requests_admitted_total over the step; "
                "temperature 0, streaming"
            ],
        ),
        cache,
        end - middle,
    )


# ----------------------------------------------------------------------------- report and main


def capacity_table(rps: float, e2e_s: float) -> Table:
    from settings.schema import SimConfig

    step_s = TOKEN_MS / 1000 * (1 + SimConfig().batch_slowdown * (LIMIT - 1))
    return Table(
        f"Capacity of one upstream C1 ({LIMIT} running, {MAX_TOKENS} tokens each)",
        ["", "req/s", "end-to-end mean ms"],
        [
            ["measured, closed loop, sets the rates", f"{rps:.2f}", ms(e2e_s)],
            [
                f"computed: {LIMIT} / ({MAX_TOKENS} x {step_s * 1000:.1f} ms)",
                f"{LIMIT / (MAX_TOKENS * step_s):.2f}",
                ms(MAX_TOKENS * step_s),
            ],
        ],
        ["computed leaves out prefill and HTTP"],
    )


def targets(rates: list[float], errors_before: int, cache: list[str], generated: float) -> Table:
    checks = [
        (
            f"throughput, {n} upstreams",
            f">= 0.9 x {n} x {rates[0]:.2f} req/s",
            f"{rates[n - 1]:.2f} ({rates[n - 1] / (n * rates[0]):.2f} x)",
            rates[n - 1] >= 0.9 * n * rates[0],
        )
        for n in (2, 3)
    ]
    checks += [
        ("failover: errors before the first token", "0", str(errors_before), errors_before == 0),
        ("Redis: A's answer is a hit on B", "MISS then HIT", " then ".join(cache), cache == ["MISS", "HIT"]),
        ("Redis: one question at A and B at once", "generated once", f"{generated:g} x", generated == 1),
    ]
    return Table(
        "Targets",
        ["target", "goal", "measured", "result"],
        [check_row(*c) for c in checks],
        [f"3 upstreams with prefix affinity off: {rates[3]:.2f} req/s ({rates[3] / (3 * rates[0]):.2f} x)"],
    )


def measure(args: argparse.Namespace, runs: dict[str, list[Record]]) -> list[Table]:
    upstreams = [upstream_process(i) for i in range(3)]
    try:
        note(f"starting 3 upstreams (simulator, {LIMIT} running, {TOKEN_MS:g} ms a token) ...")
        for u in upstreams:
            u.start()
        for u in upstreams:
            u.wait_ready(step_s=0.1)
        c1, e2e_s = asyncio.run(closed_loop(upstreams[0].url))
        note(f"C1 = {c1:.2f} req/s")
        scale, rates = scaling(upstreams, c1, args, runs)
        tables = [capacity_table(c1, e2e_s), scale, affinity(upstreams, c1, args, runs)]
        fail, errors_before = failover(upstreams, c1, args, runs)
        redis_table, cache, generated = shared_cache(upstreams[0], args)
    finally:
        for u in upstreams:
            u.interrupt()
        for u in upstreams:
            u.stop()
    return [*tables, fail, redis_table, targets(rates, errors_before, cache, generated)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/cluster.py", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--duration",
        type=float,
        default=20.0,
        help="seconds of sending per upstream count (default 20; affinity half, failover 1.5 x)",
    )
    p.add_argument("--seed", type=int, default=1, help="seed of the arrival sequences (default 1)")
    p.add_argument(
        "--gateway-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for every gateway, passed to app.py as --set (repeatable)",
    )
    p.add_argument("--json", metavar="PATH", help="write the tables and every request record as JSON")
    p.add_argument("--markdown", metavar="PATH", help=f"rewrite the '{SECTION}' section of this file")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop_on_sigterm()
    started = time.monotonic()
    meta: dict[str, Any] = {
        "commit": git_head(),
        "seed": args.seed,
        "duration_s": args.duration,
        "gateway_set": args.gateway_set,
    }
    print("bench/cluster.py  " + "  ".join(f"{k}={v}" for k, v in meta.items()), flush=True)
    runs: dict[str, list[Record]] = {}
    try:
        tables = measure(args, runs)
    except (KeyboardInterrupt, RuntimeError) as exc:  # every process is stopped by then
        interrupted = isinstance(exc, KeyboardInterrupt)
        note("interrupted; servers stopped" if interrupted else f"error: {exc}")
        return 130 if interrupted else 1
    meta["run_s"] = time.monotonic() - started
    for t in tables:
        print("\n" + t.text())
    missed = [r[0] for r in tables[-1].rows if r[-1] == "MISS"]
    print(
        f"\n{'all targets met' if not missed else 'missed: ' + ', '.join(map(str, missed))}; "
        f"run time {meta['run_s']:.0f} s"
    )
    if args.json:
        write_json(
            Path(args.json),
            {
                "meta": meta,
                "tables": [asdict(t) for t in tables],
                "records": {name: [asdict(r) for r in recs] for name, recs in runs.items()},
            },
        )
    if args.markdown:
        head = (
            f"{SECTION}\n\n`bench/cluster.py`: 1, 2 and 3 upstreams (our server on the simulator engine) behind "
            "one gateway (`engine.backend: openai`): throughput, prefix affinity, failover when an upstream is "
            "killed, and two gateways sharing a Redis cache (its docstring has the details). Run with "
            "`.venv/bin/python bench/cluster.py --markdown docs/BENCHMARKS.md`.\n\n"
            f"Run: commit {meta['commit']}, seed {args.seed}, {args.duration:g} s of sending per upstream count, "
            f"gateway settings: {' '.join(args.gateway_set) or 'defaults'}, {meta['run_s']:.0f} s.\n"
        )
        write_section(Path(args.markdown), SECTION, "\n".join([head, *(t.markdown() for t in tables)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
