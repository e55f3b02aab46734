"""Which waiting request starts next, and whether it may start now: a decision as data, with its
reason, from the scheduler's state. Pure and synchronous: the dispatcher carries it out. The
mechanism (scheduler/dispatcher.py) knows no order; a policy knows no asyncio."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from scheduler.caller_share import CallerShare
from scheduler.queue import PriorityQueue
from scheduler.request import PriorityClass, Request
from scheduler.state import SchedulerState
from settings.schema import SchedulerConfig


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


class Order(Protocol):
    """Which waiter is next in line, before anything is asked of the engine's room."""

    def next_up(self, queue: PriorityQueue, share: CallerShare) -> Request | None: ...


class QueueOrder:
    """The queue's own order: class, then score rising with the wait (aging); a caller at its
    `max_parallel` is passed over."""

    def next_up(self, queue: PriorityQueue, share: CallerShare) -> Request | None:
        return _head(queue, share)


class FairOrder:
    """The queue's order says which class goes next; within it, the best waiter of the caller
    served least (scheduler/fair_share.py), so one caller's many requests do not crowd out others."""

    def next_up(self, queue: PriorityQueue, share: CallerShare) -> Request | None:
        head = _head(queue, share)
        if head is None:
            return None
        return share.least_served(queue, head.priority) or head


def _head(queue: PriorityQueue, share: CallerShare) -> Request | None:
    head = queue.peek()
    if head is not None and not share.may_run(head):
        head = next((r for r in queue.ranked() if share.may_run(r)), None)
    return head


def policy_for(config: SchedulerConfig) -> SchedulingPolicy:
    """The policy the configuration describes: fair share inside a class (`fair_share.enabled`)
    or the queue's own order."""
    return ClassPolicy(FairOrder() if config.fair_share.enabled else QueueOrder())


class ClassPolicy:
    """Priority classes in order, each request's score rising with its wait (aging); within a class
    the least-served caller first (fair share, when on); a caller at its `max_parallel` waits; slots
    kept for high (while one waits) let a high request start past a lower head that does not fit,
    and while high traffic alone fills the running limit and is here (waiting, or holding half the
    limit) no lower request starts, however long it aged (accepted with a long promise, it would
    hold a slot high needs for its whole decode); a request that gave its slot to high
    (scheduler/takeback.py) lets a waiting high that can start go first. Which parts apply
    follows the configuration: the order (`policy_for`), `aging_per_s`, `limit.high_reserve`."""

    def __init__(self, order: Order) -> None:
        self.order = order

    def next_start(self, state: SchedulerState) -> Decision:
        if state.closed:
            return _CLOSED
        high_waiting = state.queue.count(PriorityClass.HIGH) > 0
        if not state.admission.has_any_slot(high_waiting):
            return _NO_SLOT
        head = self.order.next_up(state.queue, state.share)
        if head is None:
            return _EMPTY
        held = head.priority is not PriorityClass.HIGH and state.admission.held_for_high(high_waiting)
        if held or (head.suspended and high_waiting):
            high = _high_behind(state, head) if high_waiting else None  # an aged lower head waits too
            if high is not None:
                return Decision(high, Reason.HIGH_FIRST)
            if held:
                return _HEAD_WAITS
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
