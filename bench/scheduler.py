"""Scheduler benchmark: queue policy cost at 10,000 waiters, and the HTTP layer's added latency.

    .venv/bin/python bench/scheduler.py            # about 1-2 minutes on 2 cores
    .venv/bin/python bench/scheduler.py --quick    # a few seconds, a smoke run
    .venv/bin/python bench/scheduler.py --skip-http / --skip-queue

Part 1 (in process):
  * PriorityQueue.push / pop with 10,000 requests of mixed classes queued: each operation timed on
    its own with time.perf_counter_ns at that steady size (push one, pop one), p50 and mean.
  * The real Scheduler over a zero-latency SimEngine with few slots, so the queue holds 10,000:
    Scheduler.submit per request, and the scheduler's dispatch path (peek, admission check, pop,
    start the engine task) per dispatched request.
Part 2 (over HTTP, server in its own process so the client does not share its CPU/GIL):
  * `python app.py` with a zero-latency simulator, against a bare FastAPI/uvicorn endpoint started
    the same way (`python bench/scheduler.py --baseline-server PORT`) that returns a similar
    chat.completion body; non-streaming, max_tokens=1, async httpx client at concurrency 1, 8, 32.
    Added latency = ours minus baseline at concurrency 1.

A benchmark, not a test: it prints tables and a PASS/MISS summary, and always exits 0 unless
something failed to run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import random
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root first: see bench/common.py

# FastAPI resolves the baseline endpoint's (string) annotations in this module's globals.
from starlette.requests import Request as StarletteRequest  # noqa: E402

from bench.common import SIM_SERVER_SETTINGS, Progress, Stats, note, table  # noqa: E402
from bench.clients import LoadResult, load_row, repeat_load  # noqa: E402
from bench.servers import app_argv, free_port, running_server  # noqa: E402
from scheduler.estimate import ArrivalRates  # noqa: E402

QUEUE_SIZE = 10_000
BIG_QUEUE_SIZE = 100_000
CALLERS = 100
EXTRA: list[str] = []
QUEUE_TARGET_US = 20.0
BIG_QUEUE_TARGET_US = 40.0  # at 100,000 waiting
ADDED_P50_TARGET_MS = 2.0
CONCURRENCIES = (1, 8, 32)
SERVER_SETTINGS = SIM_SERVER_SETTINGS


# ----------------------------------------------------------------------------- part 1: queue policy

def _make_requests(n: int, rng: random.Random, start_arrival: float, prefix: str) -> list:
    """Mixed classes as the API would score them: 20 % high, 50 % medium, 30 % low, a third short,
    from CALLERS callers in turn (fair share picks among them)."""
    from core.types import GenParams, Prompt
    from scheduler.request import PriorityClass, Request
    from settings.schema import SchedulerConfig

    cfg = SchedulerConfig()
    classes = rng.choices(list(PriorityClass), weights=(20, 50, 30), k=n)
    out = []
    for i, cls in enumerate(classes):
        score = cfg.weights.of(cls.value) + (cfg.short_bonus if rng.random() < 1 / 3 else 0.0)
        out.append(Request(request_id=f"{prefix}-{i}", priority=cls, score=score,
                           prompt=Prompt(num_tokens=rng.randint(8, 200)), params=GenParams(max_tokens=1),
                           arrival=start_arrival + i * 1e-4, caller=f"caller-{i % CALLERS}"))
    return out


def timer_overhead_ns(n: int = 200_000) -> float:
    ns = time.perf_counter_ns
    samples = []
    for _ in range(n):
        t0 = ns()
        samples.append(ns() - t0)
    samples.sort()
    return Stats.of(samples).p50


@dataclass
class QueueResult:
    push_ns: list[int]
    pop_ns: list[int]
    pair_batched_ns: float
    size_after: int


def bench_priority_queue(pairs: int, rng: random.Random) -> QueueResult:
    from scheduler.queue import PriorityQueue
    from settings.schema import SchedulerConfig

    queue = PriorityQueue(SchedulerConfig().aging_per_s)
    for r in _make_requests(QUEUE_SIZE, rng, 0.0, "fill"):
        queue.push(r)
    # Arrivals keep increasing after the fill, as they would in a live queue.
    fresh = _make_requests(pairs, rng, QUEUE_SIZE * 1e-4, "pq")
    ns = time.perf_counter_ns
    push_ns: list[int] = []
    pop_ns: list[int] = []
    progress = Progress("PriorityQueue push+pop", pairs)
    chunk = max(1, pairs // 20)
    gc.collect()
    for start in range(0, pairs, chunk):
        for r in fresh[start:start + chunk]:
            t0 = ns()
            queue.push(r)
            t1 = ns()
            queue.pop()
            t2 = ns()
            push_ns.append(t1 - t0)
            pop_ns.append(t2 - t1)
        progress.update(min(start + chunk, pairs))
    progress.done()
    assert len(queue) == QUEUE_SIZE, len(queue)

    # The same pairs timed as one block: the mean without per-operation timer overhead.
    again = _make_requests(pairs, rng, 2 * QUEUE_SIZE * 1e-4 + pairs * 1e-4, "pq2")
    push, pop = queue.push, queue.pop
    gc.collect()
    t0 = ns()
    for r in again:
        push(r)
        pop()
    batched = (ns() - t0) / pairs
    return QueueResult(push_ns, pop_ns, batched, len(queue))


@dataclass
class SchedulerResult:
    fill_ns: list[int] = field(default_factory=list)
    submit_ns: list[int] = field(default_factory=list)
    dispatch_ns_per_req: list[float] = field(default_factory=list)
    dispatched: int = 0
    queue_min: int = 0
    queue_max: int = 0
    completed: int = 0
    steady_s: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)
    emergency_seen: bool = False


async def _bench_scheduler_async(measured: int, batch: int, max_concurrency: int, rng: random.Random,
                                 queue_size: int) -> SchedulerResult:
    from engine.registry import create_engine
    from scheduler.loop import Scheduler
    from settings import load_config

    config = load_config(None, overrides=[
        "engine.backend=sim", "engine.sim.token_latency_ms=0", "engine.sim.prefill_ms_per_token=0", "logging.file=",
        f"scheduler.max_concurrency={max_concurrency}", "scheduler.max_queue_size=1000000",
        # 10,000 waiters on 8 slots are predicted to wait far past the default limits, which would
        # refuse them at the door: the benchmark measures the queue, so no wait is too long here.
        *(f"scheduler.max_wait_s.{c}=1000000" for c in ("high", "medium", "low")),
        "scheduler.pressure.low_max_wait_s=1000000", *EXTRA,
    ])
    engine = create_engine(config.engine)
    sched = Scheduler(config.scheduler, engine)
    sched.arrivals = _NoOvertaking()
    await engine.start()
    await sched.start()
    res = SchedulerResult()
    ns = time.perf_counter_ns

    # Dispatch is timed by wrapping the scheduler's own _dispatch (peek, admission check, pop,
    # start the engine task), only while the loop drains; submit is timed with the plain method.
    original_dispatch = sched._dispatch

    def timed_dispatch() -> None:
        before = len(sched.queue)
        t0 = ns()
        original_dispatch()
        dt = ns() - t0
        n = before - len(sched.queue)
        if n > 0:
            res.dispatched += n
            res.dispatch_ns_per_req.extend([dt / n] * n)

    try:
        fill = _make_requests(queue_size + max_concurrency, rng, 0.0, "fill")
        progress = Progress("Scheduler fill", len(fill))
        gc.collect()
        for i, r in enumerate(fill):
            t0 = ns()
            sched.submit(r)
            res.fill_ns.append(ns() - t0)
            if i % 1000 == 0:
                progress.update(i)
        progress.done()
        target = len(sched.queue)  # queue_size: the first max_concurrency went straight to the engine

        fresh = _make_requests(measured, rng, 0.0, "sub")
        progress = Progress(f"Scheduler submit+dispatch @ {target} queued", measured)
        res.queue_min = res.queue_max = target
        tokens_before = engine.stats().generated_tokens
        t_start = time.perf_counter()
        gc.collect()
        for start in range(0, measured, batch):
            for r in fresh[start:start + batch]:
                t0 = ns()
                sched.submit(r)
                res.submit_ns.append(ns() - t0)
            res.queue_max = max(res.queue_max, len(sched.queue))
            # Let the engine finish running requests; each finish dispatches the next waiter.
            sched._dispatch = timed_dispatch
            spins = 0
            while len(sched.queue) > target and spins < 100_000:
                await asyncio.sleep(0)
                spins += 1
            del sched._dispatch
            res.queue_min = min(res.queue_min, len(sched.queue))
            res.emergency_seen = res.emergency_seen or sched.pressure.emergency
            progress.update(min(start + batch, measured), f"queued={len(sched.queue)}")
        res.steady_s = time.perf_counter() - t_start
        progress.done()
        # max_tokens=1: one generated token per request that ran to the end
        res.completed = engine.stats().generated_tokens - tokens_before
        for info in sched._finished.values():  # the scheduler keeps the last 1000
            res.outcomes[info["outcome"]] = res.outcomes.get(info["outcome"], 0) + 1
    finally:
        sched.__dict__.pop("_dispatch", None)
        await sched.shutdown()
        await engine.stop()
    return res


class _NoOvertaking(ArrivalRates):
    """The benchmark submits 100,000 requests a second, faster than any engine drains: the door
    would rightly call every lower request's start "never". It measures the queue, so no class
    is counted as overtaking another."""

    def above(self, priority, now: float) -> float:
        super().above(priority, now)
        return 0.0


def bench_scheduler(measured: int, batch: int, max_concurrency: int, rng: random.Random,
                    queue_size: int = QUEUE_SIZE) -> SchedulerResult:
    return asyncio.run(_bench_scheduler_async(measured, batch, max_concurrency, rng, queue_size))


def us(ns_value: float) -> str:
    return f"{ns_value / 1000:.2f}"


def run_part1(args: argparse.Namespace, summary: list[list[object]]) -> None:
    rng = random.Random(1234)
    pairs = 20_000 if args.quick else 200_000
    measured = 3_000 if args.quick else 30_000
    overhead = timer_overhead_ns(50_000 if args.quick else 200_000)
    note("Part 1: queue policy at 10,000 queued requests")
    q = bench_priority_queue(pairs, rng)
    s = bench_scheduler(measured, batch=50, max_concurrency=8, rng=rng)
    big = bench_scheduler(measured, batch=50, max_concurrency=8, rng=rng, queue_size=BIG_QUEUE_SIZE)

    push, pop = Stats.of(q.push_ns), Stats.of(q.pop_ns)
    pair = Stats.of([a + b for a, b in zip(q.push_ns, q.pop_ns)])
    fill = Stats.of(s.fill_ns)
    submit = Stats.of(s.submit_ns)
    dispatch = Stats.of(s.dispatch_ns_per_req)
    rows = [
        ["PriorityQueue.push (enqueue)", f"{QUEUE_SIZE:,}", f"{push.n:,}", us(push.p50), us(push.mean), us(push.p99),
         us(push.max)],
        ["PriorityQueue.pop (dispatch)", f"{QUEUE_SIZE:,}", f"{pop.n:,}", us(pop.p50), us(pop.mean), us(pop.p99),
         us(pop.max)],
        ["PriorityQueue push+pop pair", f"{QUEUE_SIZE:,}", f"{pair.n:,}", us(pair.p50), us(pair.mean), us(pair.p99),
         us(pair.max)],
        ["  pair, block-timed (no timer)", f"{QUEUE_SIZE:,}", f"{pairs:,}", "-", us(q.pair_batched_ns), "-", "-"],
        ["Scheduler.submit, filling", f"0..{QUEUE_SIZE:,}", f"{fill.n:,}", us(fill.p50), us(fill.mean), us(fill.p99),
         us(fill.max)],
        ["Scheduler.submit (enqueue)", f"{s.queue_min:,}-{s.queue_max:,}", f"{submit.n:,}", us(submit.p50),
         us(submit.mean), us(submit.p99), us(submit.max)],
        ["Scheduler dispatch, per request", f"{s.queue_min:,}-{s.queue_max:,}", f"{dispatch.n:,}", us(dispatch.p50),
         us(dispatch.mean), us(dispatch.p99), us(dispatch.max)],
        *scheduler_rows(big),
    ]
    outcomes = ", ".join(f"{k}={v}" for k, v in sorted(s.outcomes.items())) or "none"
    print()
    print(table(
        "Queue policy cost (microseconds per operation; perf_counter_ns around each call)",
        ["operation", "queued", "ops", "p50 us", "mean us", "p99 us", "max us"], rows,
        [f"timer overhead per measurement ~{overhead:.0f} ns (included above); classes 20/50/30 % high/medium/low",
         f"Scheduler: {CALLERS} callers, fair share on; zero-latency SimEngine, max_concurrency=8, max_tokens=1; dispatch = the scheduler's "
         "_dispatch (peek, admission, pop, start engine task) divided by requests it dispatched",
         f"Scheduler steady phase: {s.completed:,} requests through the engine in {s.steady_s:.2f}s "
         f"({s.completed / s.steady_s if s.steady_s else 0:,.0f} req/s in process, incl. SimEngine); "
         f"last 1000 outcomes: {outcomes}; emergency mode seen: {s.emergency_seen}"],
    ))
    for label, st in [("PriorityQueue.push mean @10k", push), ("PriorityQueue.pop mean @10k", pop),
                      ("Scheduler.submit mean @10k", submit), ("Scheduler dispatch mean @10k", dispatch)]:
        value = st.mean / 1000
        summary.append([label, f"< {QUEUE_TARGET_US:g} us", f"{value:.2f} us",
                        "PASS" if value < QUEUE_TARGET_US else "MISS"])
    for label, st in [("Scheduler.submit mean @100k", Stats.of(big.submit_ns)),
                      ("Scheduler dispatch mean @100k", Stats.of(big.dispatch_ns_per_req))]:
        value = st.mean / 1000
        summary.append([label, f"< {BIG_QUEUE_TARGET_US:g} us", f"{value:.2f} us",
                        "PASS" if value < BIG_QUEUE_TARGET_US else "MISS"])


def scheduler_rows(s: SchedulerResult) -> list[list[object]]:
    submit, dispatch = Stats.of(s.submit_ns), Stats.of(s.dispatch_ns_per_req)
    span = f"{s.queue_min:,}-{s.queue_max:,}"
    return [[name, span, f"{st.n:,}", us(st.p50), us(st.mean), us(st.p99), us(st.max)]
            for name, st in (("Scheduler.submit (enqueue)", submit), ("Scheduler dispatch, per request", dispatch))]


# ----------------------------------------------------------------------------- part 2: HTTP


def baseline_app():  # noqa: ANN201 - FastAPI imported lazily
    """The least a FastAPI endpoint can do for this route: read the JSON, answer a similar body."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI(title="baseline")

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @app.post("/v1/chat/completions")
    async def chat(request: StarletteRequest) -> JSONResponse:
        body = await request.json()
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        prompt_tokens = sum(len(str(m.get("content", "")).split()) + 4 for m in body.get("messages", [])) + 1
        return JSONResponse({
            "id": request_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or "sim",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "the"},
                         "logprobs": None, "finish_reason": "length"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1},
        }, headers={"X-Request-ID": request_id})

    return app


def run_baseline_server(port: int) -> int:
    import uvicorn

    # Started the way app.py starts its server: same uvicorn.Config knobs, asyncio loop, h11/httptools
    config = uvicorn.Config(baseline_app(), host="127.0.0.1", port=port, log_level="warning",
                            timeout_graceful_shutdown=5)
    uvicorn.Server(config).run()
    return 0


PAYLOAD = {"model": "sim", "messages": [{"role": "user", "content": "Say hello in one word."}],
           "max_tokens": 1, "temperature": 0}


def run_part2(args: argparse.Namespace, summary: list[list[object]]) -> None:
    warmup = 0.3 if args.quick else 0.5
    duration = 1.0 if args.quick else 8.0
    rounds = 1 if args.quick else 4
    note("Part 2: HTTP, server in its own process, async httpx client")
    ours_port, base_port = free_port(), free_port()
    ours_argv = app_argv(ours_port, SERVER_SETTINGS)
    base_argv = [sys.executable, str(Path(__file__).resolve()), "--baseline-server", str(base_port)]
    results: dict[tuple[str, int], LoadResult] = {}
    with running_server("ours", ours_argv, ours_port) as ours, \
            running_server("baseline", base_argv, base_port) as base:
        servers = [("baseline", base), ("ours", ours)]
        for c in CONCURRENCIES:
            # Rounds alternate the order (B, O, O, B, ...) so drift hits both sides alike.
            for rnd in range(rounds):
                order = servers if rnd % 2 == 0 else servers[::-1]
                for name, server in order:
                    label = f"{name} c={c} round {rnd + 1}/{rounds}"
                    r = asyncio.run(repeat_load(server.url, server.pid, PAYLOAD, {}, c, warmup, duration / rounds,
                                                label))
                    results.setdefault((name, c), LoadResult()).merge(r)

    rows = []
    stats: dict[tuple[str, int], Stats] = {}
    cpu: dict[tuple[str, int], float | None] = {}
    for c in CONCURRENCIES:
        for name in ("baseline", "ours"):
            row, stats[(name, c)], cpu[(name, c)] = load_row(name, c, results[(name, c)])
            rows.append(row)
        o, b = stats[("ours", c)], stats[("baseline", c)]
        co, cb = cpu[("ours", c)], cpu[("baseline", c)]
        rows.append(["  added (ours - baseline)", c, "", "", "", f"{o.p50 - b.p50:+.2f}", f"{o.p99 - b.p99:+.2f}",
                     f"{o.mean - b.mean:+.2f}", "", f"{co - cb:+,.0f}" if co is not None and cb is not None else "",
                     ""])
    errors = [f"{name} c={c}: {r.error_sample}" for (name, c), r in results.items() if r.error_sample]
    print()
    print(table(
        "HTTP: non-streaming chat completions, max_tokens=1 (latency in milliseconds, client-measured)",
        ["server", "conc", "requests", "errors", "req/s", "p50 ms", "p99 ms", "mean ms", "max ms",
         "srv cpu us/req", "client cpu"], rows,
        [f"ours: python app.py {' '.join('--set ' + s for s in SERVER_SETTINGS)}",
         "baseline: bare FastAPI endpoint (parse JSON, return a chat.completion body) under the same uvicorn",
         f"{duration:g}s measured per cell after {warmup:g}s warm-up, in {rounds} alternating round(s); "
         f"client and servers share {os.cpu_count()} CPUs; client cpu near 100% means req/s is client-bound "
         "(httpx costs more CPU per request than either server)",
         "srv cpu us/req: server process CPU time (/proc) over the measured window / requests answered",
         *(f"first error: {e}" for e in errors)],
    ))
    o, b = stats[("ours", 1)], stats[("baseline", 1)]
    added_p50, added_p99 = o.p50 - b.p50, o.p99 - b.p99
    summary.append(["HTTP added p50 @ concurrency 1", f"< {ADDED_P50_TARGET_MS:g} ms", f"{added_p50:.2f} ms",
                    "PASS" if added_p50 < ADDED_P50_TARGET_MS else "MISS"])
    summary.append(["HTTP added p99 @ concurrency 1", "(info)", f"{added_p99:.2f} ms", "-"])
    total_errors = sum(r.errors for r in results.values())
    summary.append(["HTTP errors (all cells)", "0", str(total_errors), "PASS" if total_errors == 0 else "MISS"])


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/scheduler.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a short run of a few seconds")
    p.add_argument("--skip-queue", action="store_true", help="skip part 1 (queue policy, in process)")
    p.add_argument("--skip-http", action="store_true", help="skip part 2 (HTTP servers)")
    p.add_argument("--baseline-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.baseline_server is not None:
        return run_baseline_server(args.baseline_server)
    import uvicorn

    started = time.monotonic()
    print(f"bench/scheduler.py  mode={'quick' if args.quick else 'full'}  python {platform.python_version()}  "
          f"uvicorn {uvicorn.__version__}  cpus={os.cpu_count()}  {platform.machine()}")
    summary: list[list[object]] = []
    if not args.skip_queue:
        run_part1(args, summary)
    if not args.skip_http:
        run_part2(args, summary)
    print()
    print(table("Summary", ["target", "goal", "measured", "result"], summary,
                [f"total run time {time.monotonic() - started:.1f}s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
