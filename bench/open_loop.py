"""Open-loop sending, shared by the load, fairness and cluster benchmarks: each planned request
sent at its time whatever happened to earlier ones, the answers waited for with a progress bar;
and a Prometheus reading summed over label sets."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

from bench.common import Progress
from bench.load_requests import Planned


async def send_on_schedule(
    plan: list[Planned], t0: float, one: Callable[[Planned], Coroutine[Any, Any, None]], bar: Progress
) -> list[asyncio.Task[None]]:
    tasks: list[asyncio.Task[None]] = []
    for p in plan:
        delay = t0 + p.at_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(p)))
        bar.update(len(tasks), f"in flight {sum(not t.done() for t in tasks)}")
    bar.done()
    return tasks


async def drain_answers(tasks: list[asyncio.Task[None]], bar: Progress) -> None:
    pending = {t for t in tasks if not t.done()}
    while pending:
        _, pending = await asyncio.wait(pending, timeout=0.5)
        bar.update(len(tasks) - len(pending), f"waiting for {len(pending)}")
    bar.done()


def metric_sum(text: str, name: str) -> float:
    """A Prometheus gauge or counter summed over its label sets (one per engine, per class)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            total += float(line.rsplit(" ", 1)[1])
    return total
