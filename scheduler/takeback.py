"""Lent slots taken back for high: which running lower requests give their slots up now.

High runs over the running limit when it must, so it rarely waits for a slot; but the lower
requests it runs beside share every decode step with it. Where high traffic alone fills the limit
(at 5x capacity on vLLM's CPU build, lows started in a level's first seconds decoded beside the
highs for ten seconds: high on time 0.29 C_slo against about 0.6 for high alone), or where a high
finds no slot at all, the newest lower requests are suspended: the engine drops their sequences,
their streams stay open, they wait in the queue in their old place (notices every second), and
resume where they stopped, their answer so far prefilled again (vLLM's prefix cache keeps most
of it). The newest first: the least to prefill again, the most of the slot's time to give back.
Only requests whose sampling the engine can carry on from plain text: no schema or tool
constraint (its grammar's state would be lost), no batch line (those yield and run again).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from scheduler.admission import AdmissionController
from scheduler.queue import PriorityQueue
from scheduler.request import PriorityClass, Request


def resumable(request: Request) -> bool:
    return (
        request.priority is not PriorityClass.HIGH
        and not request.background
        and request.params.structured is None
        and request.params.tools is None
    )


def to_take_back(
    admission: AdmissionController,
    queue: PriorityQueue,
    running: Iterable[Request],
    may_run: Callable[[Request], bool],
) -> list[Request]:
    """The lower requests to suspend now, newest first: those over the room high traffic leaves
    them while it fills the limit, or one for a waiting high that no slot or memory lets start
    (and its caller's own running limit would: else the slot would go to someone else)."""
    high = queue.oldest(PriorityClass.HIGH)
    held = admission.held_for_high(high is not None)
    blocked = high is not None and may_run(high) and admission.high_needs_room(high)
    if not held and not blocked:
        return []
    lower = sorted((r for r in running if resumable(r)), key=lambda r: r.dispatched_at or 0.0, reverse=True)
    over = admission.lower_over_room() if held else 0
    return lower[: max(over, int(blocked))]
