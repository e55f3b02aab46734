"""The control loop: a timer that expires waiters past their class's limit, samples queue
pressure (emergency mode) and steps the adaptive running limit; and the live limits (operators,
the memory guard, the engine's slots). Mixed into `scheduler.loop.Scheduler`, which owns the state."""

from __future__ import annotations

import asyncio
import logging

from scheduler.outcome import Outcome
from scheduler.request import PriorityClass, SchedulerError

log = logging.getLogger("gpt_oss_webui.queue")

_TICK_S = 0.1
NO_SLOT_LIMIT = 4096  # the running limit's ceiling when neither the config nor the engine sets one


class Control:
    async def _tick_forever(self) -> None:
        next_sample = self.clock() + self.config.pressure.interval_s
        next_limit = self.clock() + self.config.limit.interval_s
        while True:
            await asyncio.sleep(_TICK_S)
            self.expire_waiters()
            if self.clock() >= next_sample:
                next_sample = self.clock() + self.config.pressure.interval_s
                self.sample_pressure()
            if self.clock() >= next_limit:
                next_limit = self.clock() + self.config.limit.interval_s
                self.adjust_limit()

    def expire_waiters(self) -> None:
        """Accepted requests keep the limit of their class as configured: emergency mode tightens
        the door for newcomers and drops nothing already waiting. A stream that opened is never
        dropped: accepted means served."""
        now = self.clock()
        for request in self.queue.expired(now, self.accepted_wait_s):
            if not self._before_response(request):
                continue
            self.queue.remove(request.key)
            limit = self.accepted_wait_s(request.priority)
            retry = self.retry_after_s(request.priority)
            error = SchedulerError(Outcome.TIMEOUT, f"waited longer than the {request.priority.value}-priority "
                                   f"limit of {limit:g} s in the queue; retry later", retry)
            self._fail(request, error)
        self._dispatch()

    def sample_pressure(self) -> None:
        high = self.queue.count(PriorityClass.HIGH)
        wait = self.recent_wait_s()
        if self.pressure.sample(wait, high):
            state = "enter" if self.pressure.emergency else "leave"
            log.warning("emergency mode %s: avg_wait=%.2fs high_waiting=%d", state, wait, high)

    def adjust_limit(self) -> None:
        """One step of the adaptive running limit, from the TPOT measured since the last step."""
        tpot, running = self.pace.take()
        before = self.admission.max_concurrency, self.admission.high_slots
        self.admission.max_concurrency = self.limit.update(tpot, running)
        high_rate = self.arrivals.of(PriorityClass.HIGH, self.clock())
        self.admission.high_slots = self.high_demand.slots(high_rate)
        self.admission.high_traffic = high_rate > 0
        if (self.admission.max_concurrency, self.admission.high_slots) != before:
            log.debug("running limit %d -> %d, high slots %d (tpot=%.3fs over %.1f running)", before[0],
                      self.admission.max_concurrency, self.admission.high_slots, tpot or 0.0, running)
            self._dispatch()

    def _set_upper(self) -> None:
        """The running limit never passes `max_concurrency`, or the engine's slots when it is 0."""
        slots = self.engine.capabilities.max_num_seqs if self.engine.ready else 0
        self.limit.set_upper(self.config.max_concurrency or slots or NO_SLOT_LIMIT)
        self.admission.max_concurrency, self.admission.upper = self.limit.value, self.limit.upper

    def set_admission_paused(self, paused: bool) -> None:
        """Stop or resume admissions (the memory guard); the queue keeps filling, nothing is dropped."""
        self.admission.paused = paused
        self._dispatch()

    def update_limits(self, max_concurrency: int | None = None, max_queue_size: int | None = None,
                      low_max_wait_s: float | None = None) -> None:
        """Live changes from operators; nothing queued is dropped when a limit shrinks."""
        if max_concurrency is not None:
            self.config.max_concurrency = max_concurrency
            self._set_upper()
        if max_queue_size is not None:
            self.config.max_queue_size = max_queue_size
        if low_max_wait_s is not None:
            self.config.max_wait_s.low = low_max_wait_s
        log.warning("limits changed: max_concurrency=%d max_queue_size=%d low_max_wait_s=%g",
                    self.config.max_concurrency, self.config.max_queue_size, self.config.max_wait_s.low)
        self._dispatch()
