"""The scheduling policy alone: from a state built by hand, which request starts next and why,
as data; nothing runs. The dispatcher takes any policy, so another order needs no mechanism."""

from __future__ import annotations

from engine.sim import SimEngine
from scheduler.policy import ClassPolicy, Decision, FairOrder, Reason, policy_for
from scheduler.request import PriorityClass as P
from scheduler.request import Request
from scheduler.state import SchedulerState
from settings.schema import LimitConfig, SchedulerConfig, SimConfig
from tests.scheduler.factory import FakeClock, make_request
from tests.scheduler.test_loop import events_until_done, started, stop


def state(slots: int = 2, token_budget: int | None = None, high_reserve: int = 0, fair: bool = True) -> SchedulerState:
    config = SchedulerConfig(max_concurrency=slots, limit=LimitConfig(adaptive=False, high_reserve=high_reserve))
    config.fair_share.enabled = fair
    built = SchedulerState.build(config, SimEngine(SimConfig()), FakeClock())
    built.admission.max_concurrency, built.admission.token_budget = slots, token_budget
    return built


def queued(s: SchedulerState, *requests: Request) -> None:
    for request in requests:
        s.share.joining(request, s.queue)
        s.queue.push(request)
        s.share.joined(request, s.queue)


def test_each_reason_is_told() -> None:
    s = state()
    assert ClassPolicy(FairOrder()).next_start(s) == Decision(None, Reason.EMPTY)
    low, high = make_request(P.LOW, arrival=0), make_request(P.HIGH, arrival=5)
    queued(s, low, high)
    assert ClassPolicy(FairOrder()).next_start(s) == Decision(high, Reason.HEAD)
    s.admission.paused = True
    assert ClassPolicy(FairOrder()).next_start(s) == Decision(None, Reason.NO_SLOT)
    s.admission.paused, s.closed = False, True
    assert ClassPolicy(FairOrder()).next_start(s) == Decision(None, Reason.CLOSED)


def test_a_high_request_starts_past_a_head_that_does_not_fit() -> None:
    s = state(token_budget=100)
    big = make_request(P.MEDIUM, arrival=0, score=1000, prompt_tokens=60, max_tokens=60)
    high = make_request(P.HIGH, arrival=1, prompt_tokens=10, max_tokens=10)
    queued(s, big, high)
    assert ClassPolicy(FairOrder()).next_start(s) == Decision(high, Reason.HIGH_BEHIND)
    s.queue.remove(high.key)
    assert ClassPolicy(FairOrder()).next_start(s) == Decision(None, Reason.HEAD_WAITS)


def test_a_caller_at_its_running_limit_is_passed_over() -> None:
    s = state()
    busy = make_request(P.MEDIUM, arrival=0, caller="busy", max_parallel=1)
    s.share.started(make_request(P.MEDIUM, caller="busy", max_parallel=1))
    other = make_request(P.LOW, arrival=5, caller="other")
    queued(s, busy, other)
    assert ClassPolicy(FairOrder()).next_start(s) == Decision(other, Reason.HEAD)


class LowestFirst:
    """Another order entirely, for the test: the lowest class first."""

    def next_start(self, s: SchedulerState) -> Decision:
        ranked = sorted(s.queue, key=lambda r: -r.priority.rank)
        fits = [r for r in ranked if s.admission.fits(r)] if s.admission.has_any_slot() else []
        return Decision(fits[0], Reason.HEAD) if fits else Decision(None, Reason.EMPTY)


async def test_the_scheduler_carries_out_any_policy() -> None:
    sched = await started(slots=1, latency_ms=5)
    sched.dispatcher.policy = LowestFirst()
    blocker = sched.submit(make_request(P.HIGH, max_tokens=5))
    high, low = sched.submit(make_request(P.HIGH)), sched.submit(make_request(P.LOW))
    for ticket in (blocker, high, low):
        await events_until_done(ticket)
    assert blocker.request.dispatched_at < low.request.dispatched_at < high.request.dispatched_at
    await stop(sched)


async def test_waits_while_the_engine_has_room_are_counted_per_class() -> None:
    """Slots kept for high hold a low request back while a slot stands free: that time is an idle
    wait of the low class; once nothing waits, or nothing could run, none accrues."""
    clock = FakeClock()
    sched = await started(slots=2, latency_ms=1000, clock=clock, limit=LimitConfig(adaptive=False, high_reserve=0.5))
    sched.submit(make_request(P.LOW, max_tokens=50))
    held = sched.submit(make_request(P.LOW, max_tokens=5))  # one low slot of two: it waits, a slot free
    assert sched.admission.running == 1 and held.key in sched.queue
    clock.advance(3.0)
    sched.expire_waiters()  # the timer's tick marks the queue
    idle = sched.state.idle_waits.total_s
    assert idle[P.LOW] == 3.0 and idle[P.HIGH] == idle[P.MEDIUM] == 0.0
    sched.cancel(held)
    clock.advance(5.0)
    sched.expire_waiters()
    assert idle[P.LOW] == 3.0  # nothing waits any more
    await stop(sched)


def test_the_configuration_chooses_the_order() -> None:
    """Fair share on: the least-served caller's request of the head's class; off: the queue's order."""
    for fair, expected in ((True, "light"), (False, "heavy")):
        s = state(fair=fair)
        heavy, light = make_request(P.LOW, arrival=0, caller="heavy"), make_request(P.LOW, arrival=1, caller="light")
        queued(s, heavy, light)
        s.share.served("heavy", output_tokens=500)  # its running requests' answers, while both wait
        config = SchedulerConfig()
        config.fair_share.enabled = fair
        decision = policy_for(config).next_start(s)
        assert decision.reason is Reason.HEAD and decision.start is not None
        assert decision.start.caller == expected


def test_a_request_that_gave_its_slot_to_high_lets_a_waiting_high_that_can_start_go_first() -> None:
    s = state(token_budget=100)
    suspended = make_request(P.LOW, arrival=0, score=1000, prompt_tokens=10, max_tokens=10)
    suspended.suspended = True
    high = make_request(P.HIGH, arrival=1, prompt_tokens=20, max_tokens=20)
    queued(s, suspended, high)
    assert ClassPolicy(FairOrder()).next_start(s) == Decision(high, Reason.HIGH_FIRST)
    s.admission.admit(make_request(P.LOW, prompt_tokens=35, max_tokens=35))  # now the high does not fit
    assert ClassPolicy(FairOrder()).next_start(s) == Decision(suspended, Reason.HEAD)  # nobody stalls behind it
