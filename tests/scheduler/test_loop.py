"""The scheduling mechanism over the simulator engine on a real event loop."""

from __future__ import annotations

import asyncio

import pytest

from core.types import Delta
from engine.sim import SimEngine
from scheduler.controller import HIGH_PRESENT_S
from scheduler.loop import Scheduler
from scheduler.outcome import Outcome
from scheduler.request import Dispatched, SchedulerError
from scheduler.request import PriorityClass as P
from scheduler.snapshot import snapshot
from scheduler.status import overall_status
from settings.schema import LimitConfig, PerClass, SchedulerConfig, SimConfig
from tests.scheduler.factory import FakeClock, make_request


async def started(
    slots: int = 1, queue: int = 100, kv_tokens: int = 1_000_000, latency_ms: float = 1.0, clock=None, **cfg
) -> Scheduler:
    engine = SimEngine(SimConfig(token_latency_ms=latency_ms, prefill_ms_per_token=0, kv_tokens=kv_tokens))
    await engine.start()
    kwargs = {"clock": clock} if clock else {}
    cfg.setdefault("limit", LimitConfig(adaptive=False))  # a fixed running limit of `slots`
    sched = Scheduler(SchedulerConfig(max_concurrency=slots, max_queue_size=queue, **cfg), engine, **kwargs)
    await sched.start()
    return sched


async def stop(sched: Scheduler) -> None:
    await sched.shutdown()
    await sched.engine.stop()


async def events_until_done(ticket) -> list:
    out = []
    while True:
        event = await asyncio.wait_for(ticket.events.get(), 5)
        out.append(event)
        if isinstance(event, SchedulerError) or (isinstance(event, Delta) and event.finish_reason):
            return out


async def test_one_slot_runs_high_then_medium_then_low():
    sched = await started(slots=1)
    blocker = sched.submit(make_request(max_tokens=5, request_id="blocker"))
    order = []
    tickets = [sched.submit(make_request(cls, max_tokens=3, request_id=cls.value)) for cls in (P.LOW, P.MEDIUM, P.HIGH)]

    async def watch(ticket):
        events = await events_until_done(ticket)
        order.append(ticket.request_id)
        return events

    results = await asyncio.gather(watch(blocker), *(watch(t) for t in tickets))
    assert order == ["blocker", "high", "medium", "low"]
    assert all(isinstance(ev[0], Dispatched) for ev in results)
    assert [t.request.params.priority for t in tickets] == [2, 1, 0]  # vLLM order: lower runs first
    await stop(sched)


async def test_token_budget_holds_back_what_would_not_fit():
    sched = await started(slots=4, kv_tokens=100, latency_ms=5)
    first = sched.submit(make_request(prompt_tokens=30, max_tokens=30))
    second = sched.submit(make_request(prompt_tokens=30, max_tokens=30))  # 60 + 60 > 100
    assert sched.admission.running == 1 and len(sched.queue) == 1
    assert sched.admission.tokens_in_use == 60
    await events_until_done(first)
    events = await events_until_done(second)
    assert isinstance(events[0], Dispatched) and events[-1].finish_reason in ("stop", "length")
    with pytest.raises(SchedulerError) as err:
        sched.submit(make_request(prompt_tokens=50, max_tokens=51))
    assert err.value.kind == "too_large"
    await stop(sched)


async def test_full_queue_rejects_and_high_displaces_the_newest_lowest():
    sched = await started(slots=1, queue=3, latency_ms=50)
    sched.submit(make_request(max_tokens=50))
    low_old = sched.submit(make_request(P.LOW, request_id="low-old"))
    low_new = sched.submit(make_request(P.LOW, request_id="low-new"))
    medium = sched.submit(make_request(P.MEDIUM))
    with pytest.raises(SchedulerError) as err:
        sched.submit(make_request(P.MEDIUM))
    assert err.value.kind == "queue_full" and err.value.retry_after_s >= 1
    high = sched.submit(make_request(P.HIGH, request_id="vip"))
    displaced = await asyncio.wait_for(low_new.events.get(), 1)
    assert displaced.kind == "displaced" and displaced.retry_after_s >= 1
    assert [r.request_id for r in sched.queue.ranked()] == ["vip", medium.request_id, "low-old"]
    assert high.request.state.value == "queued" and low_old.events.empty()
    await stop(sched)


async def test_a_waiter_whose_stream_opened_is_never_displaced():
    sched = await started(slots=1, queue=2, latency_ms=50)
    sched.submit(make_request(max_tokens=50))
    older = sched.submit(make_request(P.LOW, request_id="older"))
    newer = sched.submit(make_request(P.LOW, request_id="newer"))
    older.stream_open = newer.stream_open = True
    with pytest.raises(SchedulerError) as err:  # every lower waiter already has its 200
        sched.submit(make_request(P.HIGH))
    assert err.value.kind == "queue_full" and err.value.retry_after_s >= 1
    older.stream_open = False  # the newest keeps its place; the older, still before its headers, goes
    sched.submit(make_request(P.HIGH, request_id="vip"))
    displaced = await asyncio.wait_for(older.events.get(), 1)
    assert displaced.kind == "displaced" and newer.events.empty()
    assert [r.request_id for r in sched.queue.ranked()] == ["vip", "newer"]
    await stop(sched)


async def test_waiters_time_out_per_class():
    clock = FakeClock()
    sched = await started(slots=1, latency_ms=50, clock=clock, max_wait_s=PerClass(high=300, medium=120, low=60))
    sched.submit(make_request(max_tokens=100))
    low = sched.submit(make_request(P.LOW))
    medium = sched.submit(make_request(P.MEDIUM))
    clock.advance(61)
    sched.expire_waiters()
    timeout = await asyncio.wait_for(low.events.get(), 1)
    assert timeout.kind is Outcome.TIMEOUT and "60 s" in timeout.message
    assert medium.events.empty() and len(sched.queue) == 1
    assert sched.finished_info(low.key)["outcome"] == "timeout"
    await stop(sched)


async def test_cancel_frees_the_queue_and_the_engine():
    sched = await started(slots=1, latency_ms=20)
    running = sched.submit(make_request(max_tokens=1000))
    queued = sched.submit(make_request())
    nxt = sched.submit(make_request(max_tokens=2))
    sched.cancel(queued)
    assert len(sched.queue) == 1
    assert (await queued.events.get()).kind == "disconnect"
    await asyncio.wait_for(running.events.get(), 1)  # dispatched
    sched.cancel(running)
    events = await events_until_done(running)
    assert events[-1].kind == "disconnect"
    done = await events_until_done(nxt)
    assert isinstance(done[0], Dispatched)
    assert sched.admission.running == 0 and sched.admission.tokens_in_use == 0
    assert sched.engine.stats().running == 0
    await stop(sched)


async def test_shutdown_fails_waiters_and_aborts_running():
    sched = await started(slots=1, latency_ms=20)
    running = sched.submit(make_request(max_tokens=1000))
    waiting = sched.submit(make_request())
    await asyncio.sleep(0.05)
    await sched.shutdown()
    assert (await events_until_done(waiting))[-1].kind == "shutdown"
    assert (await events_until_done(running))[-1].kind == "shutdown"
    assert sched.engine.stats().running == 0
    with pytest.raises(SchedulerError) as err:
        sched.submit(make_request())
    assert err.value.kind == "shutdown"
    await sched.engine.stop()


async def test_emergency_mode_boosts_high_and_shortens_low_waits():
    clock = FakeClock()
    sched = await started(slots=1, latency_ms=50, clock=clock)
    sched.submit(make_request(max_tokens=100))
    for _ in range(3):
        sched.submit(make_request(P.HIGH))
    sched.sample_pressure()
    assert sched.pressure.emergency
    boosted = sched.submit(make_request(P.HIGH))
    assert boosted.request.score == 15.0
    assert sched.max_wait_s(P.LOW) == 20.0
    for request in sched.queue.ranked():
        sched.cancel(sched.ticket(request.key))
    sched.sample_pressure()
    assert not sched.pressure.emergency and sched.max_wait_s(P.LOW) == 60.0
    await stop(sched)


async def test_highs_piling_up_enter_emergency_mode_without_waiting_for_the_sample():
    sched = await started(slots=1, latency_ms=50, limit=LimitConfig(adaptive=False, take_back=False))
    sched.submit(make_request(max_tokens=500))  # holds the one slot for 25 s
    for _ in range(2):
        sched.submit(make_request(P.HIGH))
    await asyncio.sleep(0.3)
    assert not sched.pressure.emergency  # two: no pressure (the first sample is 5 s away)
    sched.submit(make_request(P.HIGH))
    await asyncio.sleep(0.3)
    assert sched.pressure.emergency and sched.config.pressure.interval_s == 5
    await stop(sched)


async def test_highs_waiting_when_emergency_begins_keep_their_place_before_later_highs():
    """A boosted newcomer would outrank an older unboosted high for 20 s of aging: under a stream
    of highs (5x capacity on vLLM) that one waited 16 s while every later high started."""
    clock = FakeClock()
    sched = await started(slots=1, latency_ms=50, clock=clock)
    sched.submit(make_request(max_tokens=100))  # holds the one slot
    waiting = [sched.submit(make_request(P.HIGH, score=10.0)) for _ in range(3)]
    sched.sample_pressure()
    assert sched.pressure.emergency
    clock.advance(1.0)
    later = sched.submit(make_request(P.HIGH, score=10.0))
    assert [r.request_id for r in sched.queue.ranked()] == [t.request.request_id for t in (*waiting, later)]
    assert all(t.request.score == 15.0 for t in (*waiting, later))
    sched.sample_pressure()  # still pressed: nobody is boosted twice
    assert all(t.request.score == 15.0 for t in (*waiting, later)) and len(sched.queue.ranked()) == 4
    await stop(sched)


async def test_duplicate_ids_are_refused_while_in_flight():
    sched = await started(slots=1, latency_ms=20)
    ticket = sched.submit(make_request(request_id="same", max_tokens=2))
    with pytest.raises(SchedulerError) as err:
        sched.submit(make_request(request_id="same"))
    assert err.value.kind == "duplicate_id"
    await events_until_done(ticket)
    sched.submit(make_request(request_id="same", max_tokens=2))  # free again once finished
    await stop(sched)


async def test_removing_a_blocked_head_lets_the_next_request_in():
    sched = await started(slots=4, kv_tokens=100, latency_ms=20)
    sched.submit(make_request(prompt_tokens=30, max_tokens=30))
    big = sched.submit(make_request(prompt_tokens=30, max_tokens=30))  # does not fit beside the first
    small = sched.submit(make_request(P.LOW, prompt_tokens=10, max_tokens=10))
    assert sched.admission.running == 1  # the small one waits behind the head
    sched.cancel(big)
    assert sched.admission.running == 2 and isinstance(await small.events.get(), Dispatched)
    await stop(sched)


async def test_high_takes_the_slots_kept_for_it_while_low_waits():
    sched = await started(slots=10, latency_ms=50)  # 10 % of 10 slots: one kept for high
    lows = [sched.submit(make_request(P.LOW, max_tokens=200)) for _ in range(11)]
    assert sched.admission.running == 9 and len(sched.queue) == 2
    high = sched.submit(make_request(P.HIGH, max_tokens=5))
    assert isinstance(await asyncio.wait_for(high.events.get(), 1), Dispatched)
    assert sched.admission.running == 10 and all(t.request.state.value == "queued" for t in lows[9:])
    await stop(sched)


async def test_the_share_kept_for_high_is_lent_while_none_waits_and_taken_back_at_once():
    sched = await started(slots=20, latency_ms=20)
    sched.admission.max_concurrency = 10  # the running limit, under the engine's 20 slots
    lows = [sched.submit(make_request(P.LOW, max_tokens=30)) for _ in range(11)]
    assert sched.admission.running == 10 and len(sched.queue) == 1  # the slot kept for high is lent
    assert sched.state.idle_waits.total_s[P.LOW] == 0.0
    high = sched.submit(make_request(P.HIGH, max_tokens=5))
    assert high.request.state.value == "running"  # in the same scheduling step, over the limit
    assert sched.admission.running == 11 and lows[10].request.state.value == "queued"
    done = await asyncio.gather(*(events_until_done(t) for t in lows))
    assert all(isinstance(ev[-1], Delta) and ev[-1].finish_reason in ("stop", "length") for ev in done)  # none cut
    await stop(sched)


async def test_highs_start_past_a_fallen_limit_while_their_own_traffic_needs_the_slots():
    clock = FakeClock()
    sched = await started(slots=8, clock=clock)
    for ticket in [sched.submit(make_request(P.HIGH, max_tokens=9)) for _ in range(2)]:
        await events_until_done(ticket)
    for _ in range(10):
        sched.state.arrivals.record(P.HIGH, clock())  # 2 a second, in the engine 0.72 s each at the objective
    sched.adjust_limit()
    sched.admission.max_concurrency = 2  # the running limit fell (prefill stalls read as slow decoding)
    assert sched.admission.high_slots == 5
    lows = [sched.submit(make_request(P.LOW, max_tokens=2000)) for _ in range(3)]
    highs = [sched.submit(make_request(P.HIGH, max_tokens=2000)) for _ in range(6)]
    assert [t.request.state.value for t in lows] == ["running", "running", "queued"]
    assert [t.request.state.value for t in highs] == ["running"] * 5 + ["queued"]
    await stop(sched)


@pytest.mark.parametrize(("batched_prefill", "started_highs"), [(True, 24), (False, 20)])
async def test_highs_their_traffic_needs_run_up_to_where_the_tpot_line_reaches_the_objective(
    batched_prefill, started_highs
):
    """Not to the set point under it: a high held in the queue past its promise is refused at the
    door, certainly late, where one more running decodes within the objective. To the set point
    where prompts prefill one after another (llama.cpp): their stalls are not on the line."""
    clock = FakeClock()
    sched = await started(slots=40, clock=clock)
    sched.admission.batched_prefill = batched_prefill
    for n in range(1, 17):  # 30 ms alone, 2.9 ms a sequence more: the set point (0.09 s) at 20, the objective at 24
        sched.state.tpot_line.add(n, 0.03 + 0.0029 * n)
    for ticket in [sched.submit(make_request(P.HIGH, max_tokens=40)) for _ in range(2)]:
        await events_until_done(ticket)
    for _ in range(60):
        sched.state.arrivals.record(P.HIGH, clock())
    sched.adjust_limit()
    sched.admission.max_concurrency = 4  # the running limit fell
    assert sched.state.limit.target_s == pytest.approx(0.09) and sched.admission.high_slots > 24
    highs = [sched.submit(make_request(P.HIGH, max_tokens=2000)) for _ in range(25)]
    assert [t.request.state.value for t in highs] == ["running"] * started_highs + ["queued"] * (25 - started_highs)
    await stop(sched)


@pytest.mark.parametrize(("highs_in_system", "started_highs"), [(12, 41), (30, 24)])
async def test_a_burst_of_highs_runs_at_once_while_their_mean_load_is_served_on_time(highs_in_system, started_highs):
    """As the engine alone would run it: a request's TPOT is its whole answer's, and a burst passes
    within it. Not while the highs' own load, averaged, is past what the line runs at the objective."""
    clock = FakeClock()
    sched = await started(slots=48, clock=clock)
    for n in range(1, 17):  # 30 ms alone, 2.9 ms a sequence more: the objective at 24, 1.5 times it at 41
        sched.state.tpot_line.add(n, 0.03 + 0.0029 * n)
    for ticket in [sched.submit(make_request(P.HIGH, max_tokens=40)) for _ in range(2)]:
        await events_until_done(ticket)
    for _ in range(2):  # minutes at that load
        sched.state.high_load.sample(clock(), highs_in_system)
        clock.advance(60)
    for _ in range(90):
        sched.state.arrivals.record(P.HIGH, clock())
    sched.adjust_limit()
    sched.admission.max_concurrency = 4  # the running limit fell
    assert sched.admission.high_slots > 41
    highs = [sched.submit(make_request(P.HIGH, max_tokens=2000)) for _ in range(42)]
    assert [t.request.state.value for t in highs] == ["running"] * started_highs + ["queued"] * (42 - started_highs)
    await stop(sched)


@pytest.mark.parametrize(("high_ago_s", "prefilling"), [(120.0, 1), (HIGH_PRESENT_S + 1, 3)])
async def test_lower_prompts_prefill_one_at_a_time_for_minutes_after_a_high(high_ago_s, prefilling):
    """People pause between turns, and a benchmark's servers take turns: at a step to 3x capacity on
    llama.cpp after two minutes without a high, four lows prefilled together and the first high
    behind them waited 1.7 s for its first token. Five minutes without one, they batch again."""
    clock = FakeClock()
    sched = await started(slots=8, latency_ms=100, clock=clock, lower_prefills=1)
    sched.state.arrivals.record(P.HIGH, clock())
    clock.advance(high_ago_s)
    sched.adjust_limit()
    lows = [sched.submit(make_request(P.LOW, max_tokens=3)) for _ in range(3)]
    assert [t.request.state.value for t in lows].count("running") == prefilling
    await stop(sched)


async def test_with_lower_prefills_one_the_next_low_starts_at_the_first_token_of_the_last():
    sched = await started(slots=4, latency_ms=100, lower_prefills=1)
    calm = [sched.submit(make_request(P.LOW, max_tokens=1)) for _ in range(2)]
    assert [t.request.state.value for t in calm] == ["running", "running"]  # no high traffic: no limit
    first = sched.submit(make_request(P.HIGH, max_tokens=1))
    await asyncio.wait_for(asyncio.gather(*(_first_delta(t) for t in (*calm, first))), 2)
    lows = [sched.submit(make_request(P.LOW, max_tokens=3)) for _ in range(3)]
    assert [t.request.state.value for t in lows] == ["running", "queued", "queued"]
    high = sched.submit(make_request(P.HIGH, max_tokens=3))
    assert high.request.state.value == "running"  # high is never held back by a lower prefill
    await asyncio.wait_for(asyncio.gather(_first_delta(lows[0]), _first_delta(high)), 2)
    assert [t.request.state.value for t in lows] == ["running", "running", "queued"]
    assert overall_status(snapshot(sched))["lower_prefills"] == 1
    await stop(sched)
    sim = await started(slots=4)  # the simulator's choice: any number
    assert overall_status(snapshot(sim))["lower_prefills"] is None
    await stop(sim)


async def _first_delta(ticket) -> None:
    while not isinstance(await ticket.events.get(), Delta):
        pass


async def test_a_high_behind_an_aged_low_head_still_takes_its_slot():
    clock = FakeClock()
    sched = await started(slots=10, latency_ms=50, clock=clock)
    for _ in range(10):
        sched.submit(make_request(P.LOW, max_tokens=200))
    clock.advance(60)  # the waiting low has aged past any fresh high
    high = sched.submit(make_request(P.HIGH, max_tokens=5))
    assert sched.queue.peek().priority is P.LOW
    assert isinstance(await asyncio.wait_for(high.events.get(), 1), Dispatched)
    await stop(sched)


async def test_while_high_alone_fills_the_limit_an_aged_low_never_starts_before_a_high():
    clock = FakeClock()
    sched = await started(slots=4, latency_ms=50, clock=clock, limit=LimitConfig(adaptive=False, high_reserve=0.0))
    running = [sched.submit(make_request(P.HIGH, max_tokens=2000)) for _ in range(4)]
    low = sched.submit(make_request(P.LOW, max_tokens=5))
    clock.advance(60)  # the low has aged past any fresh high
    sched.admission.high_busy = 4.0  # high traffic alone keeps the limit busy
    high = sched.submit(make_request(P.HIGH, max_tokens=5))
    assert sched.queue.peek().priority is P.LOW and high.request.state.value == "queued"
    sched.cancel(running[0])  # a slot frees
    await asyncio.wait_for(high.events.get(), 2)
    assert high.request.state.value == "running" and low.request.state.value == "queued"
    await stop(sched)


async def test_a_request_that_cannot_start_within_its_limit_is_refused_at_the_door():
    sched = await started(slots=1, latency_ms=50, max_wait_s=PerClass(high=300, medium=120, low=60))
    sched.submit(make_request(P.LOW, max_tokens=500))
    sched.state.drain.record(10.0)  # one request every 10 s
    accepted = [sched.submit(make_request(P.LOW)) for _ in range(6)]  # the 6th starts after ~60 s
    with pytest.raises(SchedulerError) as err:
        sched.submit(make_request(P.LOW))
    assert err.value.kind == "wait_limit" and err.value.retry_after_s >= 1
    assert "60 s" in err.value.message and len(sched.queue) == len(accepted)
    sched.submit(make_request(P.HIGH))  # high jumps the queue: it would start at once
    await stop(sched)


async def test_a_waiters_estimate_counts_the_higher_classes_that_will_pass_it():
    """What a waiting stream is told counts the highs that arrive behind it and start first: at 5x
    capacity on llama.cpp, lows told 10 s without them waited 36 s (median)."""
    clock = FakeClock()
    sched = await started(slots=1, latency_ms=50, clock=clock)
    sched.state.arrivals.record(P.LOW, clock() - 30)  # up for half a minute
    for t in range(30, 0, -2):  # 15 started over it, and one now: as fast as the slots would take
        sched.state.starts.record(clock() - t)
    sched.submit(make_request(P.LOW, max_tokens=500))
    sched.state.drain.record(2.0)  # 0.5 starts a second
    low = sched.submit(make_request(P.LOW))
    position = sched.position(low.key)
    assert position == 1 and sched.estimated_wait_s(position, P.LOW) == pytest.approx(2.0)
    for _ in range(6):  # 0.2 highs a second over the half minute: 0.3 starts a second left for the low
        sched.state.arrivals.record(P.HIGH, clock())
    assert sched.estimated_wait_s(position, P.LOW) == pytest.approx(1 / 0.3)
    assert sched.estimated_wait_s(1, P.HIGH) == pytest.approx(2.0)  # nothing passes a high
    for _ in range(9):  # 0.5 highs a second take every start: no number to tell
        sched.state.arrivals.record(P.HIGH, clock())
    assert sched.estimated_wait_s(position, P.LOW) is None
    clock.advance(20)  # 6 started in the last 30 s: 0.2 a second, fewer than the slots would take
    assert sched.estimated_wait_s(1, P.HIGH) == pytest.approx(5.0)
    await stop(sched)


async def test_emergency_mode_tightens_the_door_and_keeps_accepted_waiters():
    clock = FakeClock()
    sched = await started(slots=1, latency_ms=50, clock=clock)
    sched.state.arrivals.record(P.LOW, clock() - 30)  # up for half a minute: the highs' 3 are 3 in 10 s
    sched.submit(make_request(P.LOW, max_tokens=500))
    sched.state.drain.record(2.0)  # 0.5 a second, 0.3 of it taken by the highs
    accepted = sched.submit(make_request(P.LOW))
    for _ in range(3):
        sched.submit(make_request(P.HIGH))
    sched.sample_pressure()
    assert sched.pressure.emergency and sched.max_wait_s(P.LOW) == 20.0
    with pytest.raises(SchedulerError) as err:
        sched.submit(make_request(P.LOW))  # behind three high and one low: ~25 s
    assert err.value.kind == "wait_limit" and "20 s" in err.value.message
    clock.advance(30)
    sched.expire_waiters()
    assert accepted.events.empty() and accepted.key in sched.queue  # promised 60 s, not 20
    await stop(sched)


async def test_in_emergency_a_high_that_would_miss_its_first_token_objective_is_refused_at_the_door():
    """At 5x capacity high traffic alone is what the engine serves: highs accepted past their 1 s
    objective queued ahead of later highs that could still have been on time."""
    clock = FakeClock()
    limit = LimitConfig(adaptive=False, high_reserve=0.5, take_back=False)  # no low gives a high its place
    sched = await started(slots=2, latency_ms=50, clock=clock, limit=limit)
    sched.submit(make_request(P.LOW, max_tokens=500))  # lows may hold one of the two slots
    lows = [sched.submit(make_request(P.LOW)) for _ in range(3)]
    sched.state.drain.record(4.0)  # two slots: one start every 2 s
    clock.advance(8)
    sched.sample_pressure()
    assert sched.pressure.emergency and sched.max_wait_s(P.HIGH) == 1.0  # slo.ttft_s
    first = sched.submit(make_request(P.HIGH, max_tokens=500))  # a slot for high: it passes the lows
    assert first.request.state.value == "running"
    with pytest.raises(SchedulerError) as err:
        sched.submit(make_request(P.HIGH))  # ~2 s for the next slot
    assert err.value.kind == "wait_limit" and "limit of 1 s" in err.value.message and err.value.retry_after_s >= 1
    for ticket in lows:
        sched.cancel(ticket)
    sched.sample_pressure()
    assert not sched.pressure.emergency
    accepted = sched.submit(make_request(P.HIGH))  # the same wait, promised 300 s outside emergency
    assert accepted.request.state.value == "queued"
    await stop(sched)


async def test_in_emergency_a_high_that_a_low_gives_its_place_is_accepted_at_the_door():
    """The wait the door predicts for a high counts the take-back: a low gives it its slot at once."""
    clock = FakeClock()
    sched = await started(slots=2, latency_ms=50, clock=clock, limit=LimitConfig(adaptive=False, high_reserve=0.5))
    low = sched.submit(make_request(P.LOW, max_tokens=500))
    waiting = [sched.submit(make_request(P.LOW)) for _ in range(3)]
    await asyncio.sleep(0.01)  # the low in the engine, so it can be suspended
    sched.state.drain.record(4.0)
    clock.advance(8)
    sched.sample_pressure()
    assert sched.pressure.emergency
    first = sched.submit(make_request(P.HIGH, max_tokens=500))
    second = sched.submit(make_request(P.HIGH))  # refused without the take-back: ~2 s for the next slot
    assert first.request.state.value == second.request.state.value == "running"
    assert low.request.suspended and sched.state.taken_back == 1
    for ticket in (low, *waiting, first, second):
        sched.cancel(ticket)
    await stop(sched)


async def until(condition, timeout_s: float = 30) -> bool:
    """Polls on wall time with a deadline far past what the behaviour needs: a slow CI runner waits longer."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition() and loop.time() < deadline:
        await asyncio.sleep(0.05)
    return condition()


async def test_the_running_limit_follows_the_engine_tpot():
    # Simulated step: 10 ms * (1 + slowdown * (running - 1)); the set point is 90 ms per token.
    engine = SimEngine(
        SimConfig(
            token_latency_ms=10, batch_slowdown=0.2, prefill_ms_per_token=0, natural_stop=False, kv_tokens=1_000_000
        )
    )
    await engine.start()
    config = SchedulerConfig(max_queue_size=1000, limit=LimitConfig(initial=4, interval_s=0.2))
    sched = Scheduler(config, engine)
    await sched.start()
    try:
        for _ in range(200):
            sched.submit(make_request(P.LOW, max_tokens=2000))
        assert await until(lambda: sched.admission.max_concurrency >= 25), sched.limit.tpot_s  # grows from 4
        assert await until(lambda: sched.admission.max_concurrency <= 60), sched.limit.tpot_s  # the knee: 41
        engine.config.batch_slowdown = 0.8  # each sequence now costs four times as much: the knee is 11
        assert await until(lambda: sched.admission.max_concurrency < 25), sched.limit.tpot_s
    finally:
        await stop(sched)


async def test_average_wait_returns_to_zero_one_interval_after_the_queue_empties():
    clock = FakeClock()
    sched = await started(slots=1, clock=clock)
    first = sched.submit(make_request(max_tokens=3))
    waiter = sched.submit(make_request(max_tokens=3))
    clock.advance(8)
    assert snapshot(sched).avg_wait_s == 8  # the waiter so far; the first start is older than the interval
    await events_until_done(first)
    await events_until_done(waiter)
    snap = snapshot(sched)
    assert snap.waiting_total == 0 and snap.avg_wait_s == 8 and overall_status(snap)["avg_wait_s"] == 8
    clock.advance(sched.config.pressure.interval_s + 0.1)
    assert snapshot(sched).avg_wait_s == 0
    await stop(sched)


async def test_a_request_cancelled_as_it_is_dispatched_frees_its_slot():
    sched = await started(slots=1)
    ticket = sched.submit(make_request(max_tokens=5))
    sched.cancel(ticket)  # its engine task was created but has not run a single step
    assert (await events_until_done(ticket))[-1].kind is Outcome.DISCONNECT
    await asyncio.sleep(0)
    assert sched.admission.running == 0 and sched.admission.tokens_in_use == 0
    assert sched.finished_info(ticket.key)["outcome"] == "disconnect"
    await stop(sched)


async def test_background_work_fills_the_engine_alone_and_yields_all_of_it_to_an_interactive_arrival():
    clock = FakeClock()
    sched = await started(slots=10, latency_ms=20, clock=clock)
    sched.admission.max_concurrency = 4  # the running limit: TPOT for people, and nobody waits on a token
    assert sched.idle_slots() == 10  # all the engine's slots
    background = [sched.submit(make_request(P.LOW, max_tokens=1000, background=True)) for _ in range(10)]
    assert sched.admission.running == 10 and sched.idle_slots() == 0
    with pytest.raises(SchedulerError) as err:
        sched.submit(make_request(P.LOW, background=True))
    assert err.value.kind is Outcome.YIELDED and err.value.retry_after_s == 0
    low = sched.submit(make_request(P.LOW, max_tokens=5))  # the cost of a batch line beside it is unknown
    ends = [(await events_until_done(t))[-1] for t in background]
    assert all(isinstance(e, SchedulerError) and e.kind is Outcome.YIELDED for e in ends)
    assert (await events_until_done(low))[-1].finish_reason == "length"  # whole, alone in the engine
    assert sched.engine.stats().running == 0 and sched.idle_slots() == 0  # quiet for less than quiet_s
    clock.advance(sched.config.background.quiet_s)
    assert sched.idle_slots() == 10
    await stop(sched)


async def test_batch_lines_do_not_trim_the_set_point_people_are_served_by():
    sched = await started(slots=10, latency_ms=5)
    lines = [sched.submit(make_request(P.LOW, max_tokens=20, background=True)) for _ in range(4)]
    for ticket in lines:
        await events_until_done(ticket)
    assert not sched.limit._spread  # a batch line's TPOT against its batch's is nobody's wait
    await events_until_done(sched.submit(make_request(P.LOW, max_tokens=20)))
    assert len(sched.limit._spread) == 1
    await stop(sched)


async def test_beside_interactive_work_background_keeps_what_slows_it_by_the_allowed_share():
    sched = await started(slots=20, latency_ms=20)
    sched.admission.max_concurrency = 12
    for n in range(1, 17):  # TPOT 20 ms alone, 1 ms more per sequence
        sched.state.background.line.add(n, 0.02 + 0.001 * n)
    background = [sched.submit(make_request(P.LOW, max_tokens=1000, background=True)) for _ in range(10)]
    interactive = [sched.submit(make_request(P.MEDIUM, max_tokens=1000)) for _ in range(2)]
    # 0.1 x (20 ms + 2 x 1 ms) / 1 ms: two background sequences stay, the eight newest give way
    ends = [(await events_until_done(t))[-1] for t in background[2:]]
    assert all(isinstance(e, SchedulerError) and e.kind is Outcome.YIELDED for e in ends)
    assert sched.admission.background_running == 2
    assert [t.request.preempted for t in background[:2]] == [False, False]
    assert sched.idle_slots() == 0
    for ticket in background[:2] + interactive:
        sched.cancel(ticket)
    await stop(sched)


async def test_background_work_never_waits_in_the_queue():
    sched = await started(slots=2, latency_ms=20)
    sched.submit(make_request(P.LOW, max_tokens=1000))
    sched.submit(make_request(P.LOW, max_tokens=1000))
    sched.submit(make_request(P.LOW, max_tokens=5))  # waits for a slot
    assert sched.idle_slots() == 0
    with pytest.raises(SchedulerError) as err:
        sched.submit(make_request(P.LOW, background=True))
    assert err.value.kind is Outcome.YIELDED and len(sched.queue) == 1
    await stop(sched)


async def test_a_stall_the_running_limit_holds_back_is_no_point_on_the_tpot_line():
    """llama.cpp's first interval after start, then its pace: fitted through the first, the line
    read -1.0 + 0.55 n and held every burst to one sequence."""
    sched = await started(slots=20, clock=FakeClock(), limit=LimitConfig(initial=16))
    for tpot_s, running in ((2.57, 4), (0.09, 3), (0.024, 3), (0.008, 1), (0.012, 2), (0.017, 2), (0.025, 3)):
        sched.state.pace.record(tpot_s, 1, running)
        sched.adjust_limit()
    line = sched.state.tpot_line.fit()
    assert line is not None and line[1] < 0.05 and sched.admission.max_concurrency >= 8
    await stop(sched)


async def test_while_the_engine_alone_would_serve_the_load_on_time_the_limit_holds_nothing_back():
    clock = FakeClock()
    sched = await started(slots=20, latency_ms=20, clock=clock, limit=LimitConfig(initial=4))
    for n in range(1, 17):  # TPOT 30 ms alone, 3 ms more per sequence: the 0.1 s objective holds to 23
        sched.state.tpot_line.add(n, 0.03 + 0.003 * n)
    for _ in range(30):
        clock.advance(1.0)
        sched.state.demand.sample(clock(), 10)
    sched.adjust_limit()
    assert sched.admission.max_concurrency == 4 and sched.admission.unbounded
    lows = [sched.submit(make_request(P.LOW, max_tokens=1000)) for _ in range(20)]
    assert sched.admission.running == 18 and len(sched.queue) == 2  # the engine's slots but the two kept for high
    assert sched.submit(make_request(P.HIGH, max_tokens=5)).request.state.value == "running"
    for _ in range(30):  # then a load past what the engine serves on time
        clock.advance(1.0)
        sched.state.demand.sample(clock(), 40)
    sched.adjust_limit()
    assert not sched.admission.unbounded
    for ticket in lows[:10]:
        sched.cancel(ticket)
    await asyncio.sleep(0.05)
    assert sched.admission.running >= 9 and len(sched.queue) == 2  # nothing lower starts over the limit now
    await stop(sched)
