"""The ledger: how each request ended (kept for a while, logged, told to the listeners), and the
figures read off the state for callers and the door: positions, recent and estimated waits,
Retry-After, the wait each class may be promised."""

from __future__ import annotations

import logging

from scheduler.events import QueueEvent
from scheduler.outcome import Outcome
from scheduler.request import PriorityClass, Request, RequestKey, RequestState, SchedulerError, Ticket
from scheduler.state import SchedulerState

log = logging.getLogger("gpt_oss_webui.queue")

_FINISHED_KEPT = 1000


class Ledger:
    def __init__(self, state: SchedulerState) -> None:
        self.state = state

    def fail(self, request: Request, error: SchedulerError) -> None:
        ticket = self.state.tickets.get(request.key)
        if ticket is not None:
            ticket.events.put_nowait(error)
        self.finish(request, error.kind)

    def finish(self, request: Request, outcome: Outcome) -> None:
        s = self.state
        now = s.clock()
        ticket = s.tickets.pop(request.key, None)
        if ticket is not None:
            s.engine_ids.drop(request.engine_id)
        request.state = RequestState.FINISHED
        waited = (request.dispatched_at or now) - request.arrival
        s.finished[request.key] = {
            "priority": request.priority.value,
            "caller": request.caller,
            "waited_s": round(waited, 3),
            "outcome": outcome.value,
        }
        while len(s.finished) > _FINISHED_KEPT:
            s.finished.popitem(last=False)
        log.info(
            "%s id=%s caller=%s class=%s score=%.2f wait=%.3fs total=%.3fs",
            outcome,
            request.request_id,
            request.caller,
            request.priority.value,
            request.score,
            waited,
            now - request.arrival,
        )
        self.emit(
            QueueEvent(
                "finished",
                request.priority,
                outcome,
                caller=request.caller,
                wait_s=waited,
                elapsed_s=now - request.arrival,
                was_running=request.dispatched_at is not None,
                in_stream=ticket is not None and ticket.stream_open,
            )
        )

    def emit(self, event: QueueEvent) -> None:
        for listener in self.state.listeners:
            try:
                listener(event)
            except Exception:
                log.exception("queue event listener failed")

    def position(self, key: RequestKey) -> int | None:
        s = self.state
        return s.share.position(s.queue, key, s.clock())

    def ticket(self, key: RequestKey) -> Ticket | None:
        return self.state.tickets.get(key)

    def finished_info(self, key: RequestKey) -> dict | None:
        """How a request ended, kept for the last 1,000; its caller's own name is part of the key."""
        return self.state.finished.get(key)

    def recent_wait_s(self) -> float:
        """Mean wait over the last interval: dispatched requests' waits and current waiters' so far."""
        s = self.state
        now = s.clock()
        since = now - s.config.pressure.interval_s
        waits = [w for t, w in s.recent_waits if t >= since]
        waits += [now - r.arrival for r in s.queue]
        return sum(waits) / len(waits) if waits else 0.0

    def estimated_wait_s(self, position: int, priority: PriorityClass) -> float | None:
        """Seconds until the waiter at `position` starts: the queue drains into the slots its class
        may use (or as fast as requests started lately, where that is slower), and the higher
        classes' arrivals pass it at their rate over the window. Counted without them (and at the
        running count's rate), lows told 10 s at 5x capacity on llama.cpp waited 36 s (median); at
        the door's own reading of them, lows told 21 s at 3x waited 10 s. None while nothing has
        finished, or while the higher classes alone take all the engine serves (an infinite wait,
        no number to tell)."""
        if position <= 0:
            return 0.0
        s = self.state
        now = s.clock()
        slots = s.admission.slots_for(priority, high_waiting=s.queue.count(PriorityClass.HIGH) > 0)
        modelled, started = s.drain.rate(slots), s.starts.per_s(now)
        if modelled is None:
            return None
        drains = modelled if started is None else min(modelled, started)
        left = drains - s.arrivals.steady_above(priority, now)
        return position / left if left > 0 else None

    def retry_after_s(self, priority: PriorityClass) -> int:
        s = self.state
        ahead = s.queue.count_ahead_of_new(s.config.weights.of(priority.value), s.clock())
        return s.drain.retry_after_s(ahead, self._parallel())

    def _parallel(self) -> int:
        admission = self.state.admission
        return admission.running or admission.max_concurrency

    def max_wait_s(self, priority: PriorityClass) -> float:
        """The wait a newcomer of this class may be promised now."""
        s = self.state
        return s.pressure.max_wait_s(priority, self.accepted_wait_s(priority), s.high_demand.first_token_s)

    def accepted_wait_s(self, priority: PriorityClass) -> float:
        return self.state.config.max_wait_s.of(priority.value)
