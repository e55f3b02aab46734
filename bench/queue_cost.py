"""Part 1 of bench/scheduler.py, in process: what the queue policy costs per operation with
10,000 (and 100,000) requests waiting, PriorityQueue alone and the real Scheduler over a
zero-latency SimEngine (the docstring of bench/scheduler.py has the method)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import time
from dataclasses import dataclass, field

from bench.common import Progress, Stats, note, table
from scheduler.estimate import ArrivalRates

QUEUE_SIZE = 10_000
BIG_QUEUE_SIZE = 100_000
CALLERS = 100
EXTRA: list[str] = []
QUEUE_TARGET_US = 20.0
BIG_QUEUE_TARGET_US = 40.0  # at 100,000 waiting


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
        out.append(
            Request(
                request_id=f"{prefix}-{i}",
                priority=cls,
                score=score,
                prompt=Prompt(num_tokens=rng.randint(8, 200)),
                params=GenParams(max_tokens=1),
                arrival=start_arrival + i * 1e-4,
                caller=f"caller-{i % CALLERS}",
            )
        )
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
        for r in fresh[start : start + chunk]:
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


async def _bench_scheduler_async(
    measured: int, batch: int, max_concurrency: int, rng: random.Random, queue_size: int
) -> SchedulerResult:
    from engine.registry import create_engine
    from scheduler.loop import Scheduler
    from settings import load_config

    config = load_config(
        None,
        overrides=[
            "engine.backend=sim",
            "engine.sim.token_latency_ms=0",
            "engine.sim.prefill_ms_per_token=0",
            "logging.file=",
            f"scheduler.max_concurrency={max_concurrency}",
            "scheduler.max_queue_size=1000000",
            # 10,000 waiters on 8 slots are predicted to wait far past the default limits, which would
            # refuse them at the door: the benchmark measures the queue, so no wait is too long here.
            *(f"scheduler.max_wait_s.{c}=1000000" for c in ("high", "medium", "low")),
            *(f"scheduler.pressure.{c}_max_wait_s=1000000" for c in ("high", "low")),  # emergency mode too
            *EXTRA,
        ],
    )
    engine = create_engine(config.engine)
    sched = Scheduler(config.scheduler, engine)
    sched.state.arrivals = _NoOvertaking()
    await engine.start()
    await sched.start()
    res = SchedulerResult()
    ns = time.perf_counter_ns

    # Dispatch is timed by wrapping the dispatcher's own dispatch (peek, admission check, pop,
    # start the engine task), only while the loop drains; submit is timed with the plain method.
    original_dispatch = sched.dispatcher.dispatch

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
            for r in fresh[start : start + batch]:
                t0 = ns()
                sched.submit(r)
                res.submit_ns.append(ns() - t0)
            res.queue_max = max(res.queue_max, len(sched.queue))
            # Let the engine finish running requests; each finish dispatches the next waiter.
            sched.dispatcher.dispatch = timed_dispatch  # type: ignore[method-assign]
            spins = 0
            while len(sched.queue) > target and spins < 100_000:
                await asyncio.sleep(0)
                spins += 1
            del sched.dispatcher.dispatch
            res.queue_min = min(res.queue_min, len(sched.queue))
            res.emergency_seen = res.emergency_seen or sched.pressure.emergency
            progress.update(min(start + batch, measured), f"queued={len(sched.queue)}")
        res.steady_s = time.perf_counter() - t_start
        progress.done()
        # max_tokens=1: one generated token per request that ran to the end
        res.completed = engine.stats().generated_tokens - tokens_before
        for info in sched.state.finished.values():  # the scheduler keeps the last 1000
            res.outcomes[info["outcome"]] = res.outcomes.get(info["outcome"], 0) + 1
    finally:
        sched.dispatcher.__dict__.pop("dispatch", None)
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


def bench_scheduler(
    measured: int, batch: int, max_concurrency: int, rng: random.Random, queue_size: int = QUEUE_SIZE
) -> SchedulerResult:
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
        [
            "PriorityQueue.push (enqueue)",
            f"{QUEUE_SIZE:,}",
            f"{push.n:,}",
            us(push.p50),
            us(push.mean),
            us(push.p99),
            us(push.max),
        ],
        [
            "PriorityQueue.pop (dispatch)",
            f"{QUEUE_SIZE:,}",
            f"{pop.n:,}",
            us(pop.p50),
            us(pop.mean),
            us(pop.p99),
            us(pop.max),
        ],
        [
            "PriorityQueue push+pop pair",
            f"{QUEUE_SIZE:,}",
            f"{pair.n:,}",
            us(pair.p50),
            us(pair.mean),
            us(pair.p99),
            us(pair.max),
        ],
        ["  pair, block-timed (no timer)", f"{QUEUE_SIZE:,}", f"{pairs:,}", "-", us(q.pair_batched_ns), "-", "-"],
        [
            "Scheduler.submit, filling",
            f"0..{QUEUE_SIZE:,}",
            f"{fill.n:,}",
            us(fill.p50),
            us(fill.mean),
            us(fill.p99),
            us(fill.max),
        ],
        [
            "Scheduler.submit (enqueue)",
            f"{s.queue_min:,}-{s.queue_max:,}",
            f"{submit.n:,}",
            us(submit.p50),
            us(submit.mean),
            us(submit.p99),
            us(submit.max),
        ],
        [
            "Scheduler dispatch, per request",
            f"{s.queue_min:,}-{s.queue_max:,}",
            f"{dispatch.n:,}",
            us(dispatch.p50),
            us(dispatch.mean),
            us(dispatch.p99),
            us(dispatch.max),
        ],
        *scheduler_rows(big),
    ]
    outcomes = ", ".join(f"{k}={v}" for k, v in sorted(s.outcomes.items())) or "none"
    print()
    print(
        table(
            "Queue policy cost (microseconds per operation; perf_counter_ns around each call)",
            ["operation", "queued", "ops", "p50 us", "mean us", "p99 us", "max us"],
            rows,
            [
                f"timer overhead per measurement ~{overhead:.0f} ns (included above); classes 20/50/30 % high/medium/low",
                f"Scheduler: {CALLERS} callers, fair share on; zero-latency SimEngine, max_concurrency=8, max_tokens=1; dispatch = the scheduler's "
                "dispatch (the policy's decision, pop, start engine task) divided by requests it dispatched",
                f"Scheduler steady phase: {s.completed:,} requests through the engine in {s.steady_s:.2f}s "
                f"({s.completed / s.steady_s if s.steady_s else 0:,.0f} req/s in process, incl. SimEngine); "
                f"last 1000 outcomes: {outcomes}; emergency mode seen: {s.emergency_seen}",
            ],
        )
    )
    for label, st in [
        ("PriorityQueue.push mean @10k", push),
        ("PriorityQueue.pop mean @10k", pop),
        ("Scheduler.submit mean @10k", submit),
        ("Scheduler dispatch mean @10k", dispatch),
    ]:
        value = st.mean / 1000
        summary.append(
            [label, f"< {QUEUE_TARGET_US:g} us", f"{value:.2f} us", "PASS" if value < QUEUE_TARGET_US else "MISS"]
        )
    for label, st in [
        ("Scheduler.submit mean @100k", Stats.of(big.submit_ns)),
        ("Scheduler dispatch mean @100k", Stats.of(big.dispatch_ns_per_req)),
    ]:
        value = st.mean / 1000
        summary.append(
            [
                label,
                f"< {BIG_QUEUE_TARGET_US:g} us",
                f"{value:.2f} us",
                "PASS" if value < BIG_QUEUE_TARGET_US else "MISS",
            ]
        )


def scheduler_rows(s: SchedulerResult) -> list[list[object]]:
    submit, dispatch = Stats.of(s.submit_ns), Stats.of(s.dispatch_ns_per_req)
    span = f"{s.queue_min:,}-{s.queue_max:,}"
    return [
        [name, span, f"{st.n:,}", us(st.p50), us(st.mean), us(st.p99), us(st.max)]
        for name, st in (("Scheduler.submit (enqueue)", submit), ("Scheduler dispatch, per request", dispatch))
    ]
