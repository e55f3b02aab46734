"""The controller: a timer that expires waiters past their class's limit, samples queue pressure
(emergency mode) and steps the adaptive running limit; and the live limits (operators, the memory
guard, the engine's slots)."""

from __future__ import annotations

import asyncio
import logging

from scheduler.demand import reaching
from scheduler.dispatcher import Dispatcher
from scheduler.learned_pace import LearnedPace, recall, remember
from scheduler.ledger import Ledger
from scheduler.outcome import Outcome
from scheduler.request import PriorityClass, SchedulerError
from scheduler.state import NO_SLOT_LIMIT, SchedulerState

log = logging.getLogger("gpt_oss_webui.queue")

_TICK_S = 0.1
HIGH_PRESENT_S = 300.0  # high traffic comes while one arrived this recently: people pause between turns


class Controller:
    def __init__(self, state: SchedulerState, dispatcher: Dispatcher, ledger: Ledger) -> None:
        self.state = state
        self.dispatcher = dispatcher
        self.ledger = ledger

    async def tick_forever(self) -> None:
        s = self.state
        next_sample = s.clock() + s.config.pressure.interval_s
        next_limit = s.clock() + s.config.limit.interval_s
        while True:
            await asyncio.sleep(_TICK_S)
            self.expire_waiters()
            s.demand.sample(s.clock(), s.interactive())
            s.high_load.sample(s.clock(), s.admission.high_running + s.queue.count(PriorityClass.HIGH))
            if s.clock() >= next_sample:
                next_sample = s.clock() + s.config.pressure.interval_s
                self.sample_pressure()
            elif not s.pressure.emergency and s.queue.count(PriorityClass.HIGH) >= s.config.pressure.high_waiting:
                self.sample_pressure()  # highs piling up enter it at once; it is left only at a sample
            if s.clock() >= next_limit:
                next_limit = s.clock() + s.config.limit.interval_s
                self.adjust_limit()

    def expire_waiters(self) -> None:
        """Accepted requests keep the limit of their class as configured: emergency mode tightens
        the door for newcomers and drops nothing already waiting. A stream that opened is never
        dropped: accepted means served."""
        s = self.state
        for request in s.queue.expired(s.clock(), self.ledger.accepted_wait_s):
            if not s.before_response(request.key):
                continue
            s.queue.remove(request.key)
            limit = self.ledger.accepted_wait_s(request.priority)
            retry = self.ledger.retry_after_s(request.priority)
            error = SchedulerError(
                Outcome.TIMEOUT,
                f"waited longer than the {request.priority.value}-priority "
                f"limit of {limit:g} s in the queue; retry later",
                retry,
            )
            self.ledger.fail(request, error)
        self.dispatcher.dispatch()

    def sample_pressure(self) -> None:
        s = self.state
        high = s.queue.count(PriorityClass.HIGH)
        wait = self.ledger.recent_wait_s()
        if s.pressure.sample(wait, high):
            state = "enter" if s.pressure.emergency else "leave"
            log.warning("emergency mode %s: avg_wait=%.2fs high_waiting=%d", state, wait, high)
            for request in s.queue.members(PriorityClass.HIGH):
                if (score := s.pressure.boosted(request)) is not None:
                    s.queue.rescore(request, score)
                    s.share.joined(request, s.queue)

    def adjust_limit(self) -> None:
        """One step of the adaptive running limit, from the TPOT measured since the last step. Once
        a burst's slots come back, none is lent again for the demand window: at 1x capacity on
        vLLM's CPU build (float32, AVX2) the load read as one the engine serves on time and not by
        turns, and the same four lows were lent and taken back twice in five seconds, each resumed
        late and prefilled again."""
        s = self.state
        tpot, running = s.pace.take()
        before = s.admission.max_concurrency, s.admission.high_slots, s.admission.unbounded
        line_knee = reaching(s.tpot_line.fit(), s.limit.target_s)
        s.admission.max_concurrency = s.limit.update(tpot, running, s.pace.seen_s, line_knee)
        if s.limit.counted_s is not None:  # a stall is no point on the line
            s.tpot_line.add(running, s.limit.counted_s)
        fit = self._caps_from_line()
        lending = s.clock() >= s.lend_again_at  # a burst's slots came back lately: the load proved too much
        s.admission.unbounded = lending and s.demand.served_on_time(fit, s.limit.target_s)
        if not s.admission.unbounded and self.dispatcher.take_back_lower():
            s.lend_again_at = s.clock() + s.config.limit.demand_window_s
        high_rate = s.arrivals.of(PriorityClass.HIGH, s.clock())
        s.admission.high_slots = s.high_demand.slots(high_rate)
        s.admission.high_busy = s.high_demand.busy(high_rate)
        s.admission.high_traffic = s.arrivals.seen_within(PriorityClass.HIGH, s.clock(), HIGH_PRESENT_S)
        if (s.admission.max_concurrency, s.admission.high_slots, s.admission.unbounded) != before:
            log.debug(
                "running limit %d -> %d, high slots %d, unbounded %s, burst cap %d "
                "(tpot=%.3fs over %.1f running, mean demand %.1f, line %s)",
                before[0],
                s.admission.max_concurrency,
                s.admission.high_slots,
                s.admission.unbounded,
                s.admission.burst_cap,
                tpot or 0.0,
                running,
                s.demand.mean,
                _line(fit),
            )
            self.dispatcher.dispatch()

    def learned(self) -> LearnedPace:
        return remember(self.state.limit, self.state.tpot_line)

    def relearn(self, pace: LearnedPace) -> None:
        """The limit and the TPOT line where a run before left them (once the engine's slots are known)."""
        s = self.state
        recall(pace, s.limit, s.tpot_line)
        s.admission.max_concurrency = s.limit.value
        fit = self._caps_from_line()
        log.info("running limit %d from the pace learned before (line %s)", s.limit.value, _line(fit))
        self.dispatcher.dispatch()

    def _caps_from_line(self) -> tuple[float, float] | None:
        """The caps the fitted TPOT line sets (a burst's, the highs'); returns the line. Highs' at the
        objective where prompts prefill in a batch (vLLM), not the set point under it: a high held
        past its promise is refused at the door, certainly late, where one more running decodes
        within the objective. Not on llama.cpp, whose prompts stall every decode one after another
        in gaps the line leaves out. And on vLLM, while the highs' own load averaged (`high_load`)
        is one the line serves within the objective, a burst of them runs at once up to 1.5 times
        it, as on the engine alone: an answer's TPOT is its whole life's, which a burst passes
        within (docs/BENCHMARKS.md, twenty-first and twenty-second sessions)."""
        s = self.state
        fit = s.tpot_line.fit()
        s.admission.burst_cap = s.demand.burst_cap(fit, s.limit.target_s)
        if not s.admission.batched_prefill:
            s.admission.high_cap = reaching(fit, s.limit.target_s)
            return fit
        objective_s = max(s.limit.target_s, s.limit.objective_s)
        s.admission.high_cap = reaching(fit, objective_s)
        if s.high_load.served_on_time(fit, objective_s):
            s.admission.high_cap = s.high_load.burst_cap(fit, objective_s)
        return fit

    def set_upper(self) -> None:
        """The running limit never passes `max_concurrency`, or the engine's slots when it is 0."""
        s = self.state
        slots = s.engine.capabilities.max_num_seqs if s.engine.ready else 0
        s.limit.set_upper(s.config.max_concurrency or slots or NO_SLOT_LIMIT)
        s.admission.max_concurrency, s.admission.upper = s.limit.value, s.limit.upper

    def set_admission_paused(self, paused: bool) -> None:
        """Stop or resume admissions (the memory guard); the queue keeps filling, nothing is dropped."""
        self.state.admission.paused = paused
        self.dispatcher.dispatch()

    def update_limits(
        self, max_concurrency: int | None = None, max_queue_size: int | None = None, low_max_wait_s: float | None = None
    ) -> None:
        """Live changes from operators; nothing queued is dropped when a limit shrinks."""
        config = self.state.config
        if max_concurrency is not None:
            config.max_concurrency = max_concurrency
            self.set_upper()
        if max_queue_size is not None:
            config.max_queue_size = max_queue_size
        if low_max_wait_s is not None:
            config.max_wait_s.low = low_max_wait_s
        log.warning(
            "limits changed: max_concurrency=%d max_queue_size=%d low_max_wait_s=%g",
            config.max_concurrency,
            config.max_queue_size,
            config.max_wait_s.low,
        )
        self.dispatcher.dispatch()


def _line(fit: tuple[float, float] | None) -> str | None:
    return fit and f"{fit[0]:.3f} + {fit[1]:.4f} n"
