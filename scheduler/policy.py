"""Which waiting request starts next, and whether it may start now: a decision as data, with its
reason, from the scheduler's state. Pure and synchronous: the dispatcher carries it out. The
mechanism (scheduler/dispatcher.py) knows no order; a policy knows no asyncio."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from scheduler.request import PriorityClass, Request
from scheduler.state import SchedulerState


class Reason(str, Enum):
    HEAD = "head"  # the next request in order fits: it starts
    HIGH_BEHIND = "high_behind"  # the head does not fit, a high request behind it does (slots kept for high)
    HIGH_FIRST = "high_first"  # high traffic alone fills the running limit: high before any aged lower head
    CLOSED = "closed"  # shutting down: nothing starts
    NO_SLOT = "no_slot"  # every slot is taken, or admission is paused
    EMPTY = "empty"  # nothing waits (or every waiter's caller is at its running limit)
    HEAD_WAITS = "head_waits"  # the head does not fit yet (tokens, prefills, the slots kept for high)


@dataclass(frozen=True, slots=True)
class Decision:
    start: Request | None
    reason: Reason


_CLOSED, _NO_SLOT, _EMPTY, _HEAD_WAITS = (
    Decision(None, r) for r in (Reason.CLOSED, Reason.NO_SLOT, Reason.EMPTY, Reason.HEAD_WAITS)
)


class SchedulingPolicy(Protocol):
    def next_start(self, state: SchedulerState) -> Decision: ...


class ClassPolicy:
    """Priority classes in order, each request's score rising with its wait (aging); within a class
    the least-served caller first (fair share, when on); a caller at its `max_parallel` waits; slots
    kept for high (while one waits) let a high request start past a lower head that does not fit,
    and while high traffic alone fills the running limit and is here (waiting, or holding half the
    limit) no lower request starts, however long it aged (accepted with a long promise, it would
    hold a slot high needs for its whole decode). Which parts apply
    follows the configuration: `fair_share.enabled`, `aging_per_s`, `limit.high_reserve`."""

    def next_start(self, state: SchedulerState) -> Decision:
        if state.closed:
            return _CLOSED
        high_waiting = state.queue.count(PriorityClass.HIGH) > 0
        if not state.admission.has_any_slot(high_waiting):
            return _NO_SLOT
        head = state.share.next_up(state.queue)
        if head is None:
            return _EMPTY
        if head.priority is not PriorityClass.HIGH and state.admission.held_for_high(high_waiting):
            high = _high_behind(state, head) if high_waiting else None  # an aged lower head waits too
            return Decision(high, Reason.HIGH_FIRST) if high is not None else _HEAD_WAITS
        if state.admission.fits(head, high_waiting):
            return Decision(head, Reason.HEAD)
        high = _high_behind(state, head)
        return Decision(high, Reason.HIGH_BEHIND) if high is not None else _HEAD_WAITS


def _high_behind(state: SchedulerState, head: Request) -> Request | None:
    """When the head must wait, the oldest high request, if the slots kept for high let it run."""
    high = state.queue.oldest(PriorityClass.HIGH)
    if high is None or high is head or not state.share.may_run(high):
        return None
    return high if state.admission.fits(high, high_waiting=True) else None
