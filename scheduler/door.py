"""Decide at the door: refuse at arrival what would not start within its class's wait limit.

A refusal before the stream opens is an HTTP 429 with Retry-After that clients (the OpenAI SDK
among them) retry; the same refusal after a stream opened is an error event nobody can retry.
Pure: it reads the queue and the estimates and returns a decision.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from scheduler.admission import AdmissionController
from scheduler.estimate import ArrivalRates, DrainEstimator, retry_after
from scheduler.outcome import Outcome
from scheduler.queue import PriorityQueue
from scheduler.request import PriorityClass, Request, SchedulerError


def predicted_wait_s(
    request: Request,
    queue: PriorityQueue,
    admission: AdmissionController,
    drain: DrainEstimator,
    arrivals: ArrivalRates,
    limit_s: float,
    count_ahead: Callable[[], int],
    in_lower_place: Callable[[], bool] = lambda: False,
) -> float | None:
    """Seconds until `request` would start: 0 when it fits now, or, a high, when a lower request
    would give it its place (`in_lower_place`); None before anything has finished. Counting who is
    ahead (`count_ahead`) scans the queue, so it happens only when waiting behind everyone would
    break the limit."""
    high = request.priority is PriorityClass.HIGH
    if (not queue or (high and not queue.count(PriorityClass.HIGH))) and (
        admission.fits(request, high_waiting=high) or (high and in_lower_place())
    ):
        return 0.0  # a high passes lower waiters
    if not high and admission.high_fills_limit():
        return math.inf
    jumpers = arrivals.above(request.priority, request.arrival)
    slots = admission.slots_for(request.priority, high_waiting=queue.count(PriorityClass.HIGH) > 0)
    worst = drain.wait_s(len(queue) + 1, slots, jumpers)
    if worst is None or worst <= limit_s:
        return worst
    return drain.wait_s(count_ahead() + 1, slots, jumpers)


def wait_refusal(request: Request, wait_s: float | None, limit_s: float) -> SchedulerError | None:
    if wait_s is None or wait_s <= limit_s:
        return None
    if math.isinf(wait_s):
        return SchedulerError(
            Outcome.WAIT_LIMIT,
            f"requests of higher classes arrive faster than the engine serves "
            f"them: this {request.priority.value}-priority request would not start; retry later",
            retry_after(wait_s),
        )
    return SchedulerError(
        Outcome.WAIT_LIMIT,
        f"the queue would hold this {request.priority.value}-priority request "
        f"about {_seconds(wait_s, limit_s)} s, past its limit of {limit_s:.3g} s; retry later",
        retry_after(wait_s - limit_s),
    )


def _seconds(wait_s: float, limit_s: float) -> str:
    """Whole seconds where they say more than the limit, else tenths: refusals read "about 0 s,
    past its limit of 0.465 s" and "about 20 s, past its limit of 20 s"."""
    whole = f"{wait_s:.0f}"
    return whole if wait_s >= 10 and float(whole) > limit_s else f"{wait_s:.1f}"


def queue_room(max_queue_size: int, priority: PriorityClass, high_reserve: float) -> int:
    """High may use the whole queue; the others leave it a share, so high rarely displaces."""
    if priority is PriorityClass.HIGH:
        return max_queue_size
    return max_queue_size - int(max_queue_size * high_reserve)
