"""C_slo, the capacity every load level of bench/load.py is a multiple of: vLLM's own server in a
closed loop at rising concurrency, and the req/s where its median time per output token reaches
the objective."""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field

from bench.clients import StreamResult, stream_chat
from bench.common import Stats, timed_sleep
from bench.load_requests import CLIENT_TIMEOUT_S, fresh_prompts, new_client, request_for
from bench.load_samples import until_idle
from bench.servers import ServerProcess


@dataclass
class Level:
    concurrency: int
    rps: float
    tok_s: float
    tpot_p50_s: float
    ttft_p50_s: float
    e2e_mean_s: float
    completed: int  # requests sent and finished within the level


@dataclass
class Calibration:
    levels: list[Level]
    c_slo: float
    single_ttft_s: float | None  # one request alone: the first-token time with no queue
    stalls_s: list[float] = field(default_factory=list)  # the machine's, during the calibration
    load: float = 0.0  # the run it was measured for, just before it: this level ...
    server: str = ""  # ... on this server


async def calibrate(server: ServerProcess, levels: tuple[int, ...], measure_s: float, slo_tpot: float) -> Calibration:
    """Closed loop against vLLM FCFS: workers are added level by level (8, then 16, ...), each level
    lasting a warm-up plus measure_s. Workers that start together finish together, so counting
    completions in a short window measures those waves; instead, with no think time, Little's law
    gives the rate from the requests sent and finished within the level: c / mean(E2E)."""
    warmup_s = min(8.0, max(2.0, measure_s / 2))
    done: list[StreamResult] = []
    counter = 0

    fresh_prompts()
    async with new_client(server.url) as client:
        singles = [
            await stream_chat(client, *request_for(server.name, -10 - i, "low"), CLIENT_TIMEOUT_S) for i in range(3)
        ]
        single = Stats.of([r.ttft_s for r in singles[1:] if r.ok]).p50

        async def worker() -> None:
            nonlocal counter
            while True:
                counter += 1
                done.append(await stream_chat(client, *request_for(server.name, counter, "low"), CLIENT_TIMEOUT_S))

        workers: list[asyncio.Task[None]] = []
        out: list[Level] = []
        try:
            for c in levels:
                begin = time.perf_counter()
                workers += [asyncio.create_task(worker()) for _ in range(c - len(workers))]
                await timed_sleep(f"calibration c={c}", warmup_s + measure_s)
                sample = [r for r in done if r.ok and r.sent >= begin]
                # Too few answers yet (each takes longer than the level): extend it, up to 3 times.
                while len(sample) < min(c, 8) and time.perf_counter() - begin < 3 * (warmup_s + measure_s):
                    await asyncio.sleep(0.5)
                    sample = [r for r in done if r.ok and r.sent >= begin]
                out.append(level_of(c, sample))
        finally:
            for w in workers:
                w.cancel()  # closing the streams aborts the requests, at once in vLLM, in seconds in llama.cpp
            await asyncio.gather(*workers, return_exceptions=True)
            await until_idle(server, client)
    measured = [level for level in out if level.completed]
    if not measured:
        errors = [r.error for r in done if r.error]
        raise RuntimeError(f"calibration completed no request: {errors[0] if errors else 'no answers'}")
    return Calibration(out, c_slo(measured, slo_tpot), single if single == single else None)


def level_of(concurrency: int, sample: list[StreamResult]) -> Level:
    e2e = Stats.of([r.e2e_s for r in sample])
    rps = concurrency / e2e.mean if sample else 0.0
    return Level(
        concurrency,
        rps,
        rps * sum(r.tokens for r in sample) / len(sample) if sample else 0.0,
        Stats.of([r.tpot_s for r in sample if r.tokens >= 2]).p50,
        Stats.of([r.ttft_s for r in sample]).p50,
        e2e.mean,
        len(sample),
    )


def c_slo(levels: list[Level], slo_tpot: float) -> float:
    """The req/s at the concurrency where median TPOT reaches the objective. TPOT and mean E2E
    both grow about linearly with concurrency; a line through each (Theil-Sen: the median of the
    slopes between every pair of levels) lets no single level decide. A level caught in one of this
    machine's slow spells, once between its two neighbours, made interpolation call C_slo 1.09 req/s
    where the line says 2.0. Levels past twice the objective are left out (the curve bends there);
    the concurrency is kept within the measured ones."""
    near = [lv for lv in levels if lv.tpot_p50_s < 2 * slo_tpot] or levels
    if len(near) < 2:
        return near[0].rps
    cs = [float(lv.concurrency) for lv in near]
    tpot_at, tpot_slope = theil_sen(cs, [lv.tpot_p50_s for lv in near])
    e2e_at, e2e_slope = theil_sen(cs, [lv.e2e_mean_s for lv in near])
    knee = (slo_tpot - tpot_at) / tpot_slope if tpot_slope > 0 else max(cs)
    knee = min(max(knee, min(cs)), max(cs))
    return knee / (e2e_at + e2e_slope * knee)


def theil_sen(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the line through the points, robust to one that is off."""
    slope = statistics.median(
        (ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[j] != xs[i]
    )
    return statistics.median(y - slope * x for x, y in zip(xs, ys)), slope
