"""Bookkeeping: how each request ended (kept for a while, logged, told to the listeners), and the
figures read off the queue for callers and the door: positions, recent and estimated waits,
Retry-After. Mixed into `scheduler.loop.Scheduler`, which owns the state."""

from __future__ import annotations

import logging

from scheduler.events import QueueEvent
from scheduler.outcome import Outcome
from scheduler.request import PriorityClass, Request, RequestKey, RequestState, SchedulerError, Ticket

log = logging.getLogger("gpt_oss_webui.queue")

_FINISHED_KEPT = 1000


class Bookkeeping:
    def _fail(self, request: Request, error: SchedulerError) -> None:
        ticket = self._tickets.get(request.key)
        if ticket is not None:
            ticket.events.put_nowait(error)
        self._finish(request, error.kind)

    def _finish(self, request: Request, outcome: Outcome) -> None:
        now = self.clock()
        ticket = self._tickets.pop(request.key, None)
        if ticket is not None:
            self.engine_ids.drop(request.engine_id)
        request.state = RequestState.FINISHED
        waited = (request.dispatched_at or now) - request.arrival
        self._finished[request.key] = {"priority": request.priority.value, "caller": request.caller,
                                        "waited_s": round(waited, 3), "outcome": outcome.value}
        while len(self._finished) > _FINISHED_KEPT:
            self._finished.popitem(last=False)
        log.info("%s id=%s caller=%s class=%s score=%.2f wait=%.3fs total=%.3fs", outcome, request.request_id,
                 request.caller, request.priority.value, request.score, waited, now - request.arrival)
        self._emit(QueueEvent("finished", request.priority, outcome, caller=request.caller, wait_s=waited,
                              elapsed_s=now - request.arrival,
                              was_running=request.dispatched_at is not None,
                              in_stream=ticket is not None and ticket.stream_open))

    def _emit(self, event: QueueEvent) -> None:
        for listener in self.listeners:
            try:
                listener(event)
            except Exception:
                log.exception("queue event listener failed")

    def position(self, key: RequestKey) -> int | None:
        return self.share.position(self.queue, key, self.clock())

    def ticket(self, key: RequestKey) -> Ticket | None:
        return self._tickets.get(key)

    def finished_info(self, key: RequestKey) -> dict | None:
        """How a request ended, kept for the last 1,000; its caller's own name is part of the key."""
        return self._finished.get(key)

    def recent_wait_s(self) -> float:
        """Mean wait over the last interval: dispatched requests' waits and current waiters' so far."""
        now = self.clock()
        since = now - self.config.pressure.interval_s
        waits = [w for t, w in self._recent_waits if t >= since]
        waits += [now - r.arrival for r in self.queue]
        return sum(waits) / len(waits) if waits else 0.0

    def estimated_wait_s(self, position: int) -> float | None:
        return self.drain.wait_s(position, self._parallel())

    def retry_after_s(self, priority: PriorityClass) -> int:
        ahead = self.queue.count_ahead_of_new(self.config.weights.of(priority.value), self.clock())
        return self.drain.retry_after_s(ahead, self._parallel())

    def _parallel(self) -> int:
        return self.admission.running or self.admission.max_concurrency

    def max_wait_s(self, priority: PriorityClass) -> float:
        """The wait a newcomer of this class may be promised now."""
        return self.pressure.max_wait_s(priority, self.accepted_wait_s(priority))

    def accepted_wait_s(self, priority: PriorityClass) -> float:
        return self.config.max_wait_s.of(priority.value)
