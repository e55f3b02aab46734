"""Lent slots taken back for high (scheduler/takeback.py) over the simulator, which suspends and
resumes sequences as vLLM does: ordering and answers, not wall time."""

from __future__ import annotations

import asyncio

from core.types import Delta, Prompt
from engine.sim import SimEngine
from scheduler.loop import Scheduler
from scheduler.request import Dispatched, Request, SchedulerError
from scheduler.request import PriorityClass as P
from settings.schema import LimitConfig, PerClass, SchedulerConfig, SimConfig
from tests.scheduler.factory import FakeClock, make_request


async def started(slots: int, take_back: bool = True) -> Scheduler:
    engine = SimEngine(SimConfig(token_latency_ms=10, prefill_ms_per_token=0, natural_stop=False))
    await engine.start()
    limit = LimitConfig(adaptive=False, high_reserve=0.0, take_back=take_back)
    sched = Scheduler(SchedulerConfig(max_concurrency=slots, max_queue_size=100, limit=limit), engine)
    await sched.start()
    return sched


async def stop(sched: Scheduler) -> None:
    await sched.shutdown()
    await sched.engine.stop()


def seeded(cls: P, n: int, max_tokens: int = 40) -> Request:
    request = make_request(cls, max_tokens=max_tokens, request_id=f"{cls.value}{n}")
    request.prompt = Prompt(10, {"text": f"question {n}", "after_tool": False})
    request.params.seed = n
    return request


async def answer(ticket) -> tuple[str, int, list]:
    """The text and tokens a request's mailbox carried, and every event."""
    events = []
    while True:
        event = await asyncio.wait_for(ticket.events.get(), 10)
        events.append(event)
        if isinstance(event, SchedulerError) or (isinstance(event, Delta) and event.finish_reason):
            deltas = [e for e in events if isinstance(e, Delta)]
            return "".join(d.text for d in deltas), sum(d.num_tokens for d in deltas), events


async def alone(n: int, max_tokens: int = 40) -> tuple[str, int]:
    """The answer the same request gets on an engine of its own."""
    sched = await started(slots=1)
    text, tokens, _ = await answer(sched.submit(seeded(P.LOW, n, max_tokens)))
    await stop(sched)
    return text, tokens


async def test_a_high_that_finds_no_slot_takes_the_newest_lower_ones_and_the_answer_goes_on_intact():
    sched = await started(slots=2)
    lows = [sched.submit(seeded(P.LOW, n)) for n in (1, 2)]
    await asyncio.sleep(0.1)  # both decode a few tokens
    high = sched.submit(seeded(P.HIGH, 3, max_tokens=5))
    assert high.request.state.value == "running"  # in the same scheduling step
    assert [t.request.state.value for t in lows] == ["running", "queued"]  # the newest gave its slot up
    assert sched.state.taken_back == 1 and sched.admission.running == 2
    results = await asyncio.gather(*(answer(t) for t in lows))
    for n, (text, tokens, events) in zip((1, 2), results):
        assert (text, tokens) == await alone(n)  # nothing lost or repeated: the same answer as alone
        assert sum(isinstance(e, Dispatched) for e in events) == 1
    assert lows[1].request.resumes == 1 and lows[0].request.resumes == 0
    await stop(sched)


async def test_the_drain_counts_a_suspended_request_by_its_time_in_the_engine_not_its_wait():
    """The door reads the engine's drain from service times: a suspended wait counted as service
    halves the rate it reads and refuses highs that would start in time."""
    sched = await started(slots=1)
    low = sched.submit(seeded(P.LOW, 1))
    await asyncio.sleep(0.05)
    high = sched.submit(seeded(P.HIGH, 2, max_tokens=60))
    assert low.request.suspended
    await answer(high)
    await answer(low)
    low_wall = sched.state.clock() - (low.request.dispatched_at or 0.0)
    high_s, low_s = list(sched.state.drain._service_s)
    assert low.request.resumes == 1 and high_s >= 0.5
    assert low_s < low_wall - 0.8 * high_s  # its wait while the high ran is left out
    await stop(sched)


async def test_high_traffic_filling_the_limit_runs_over_it_and_suspends_nobody():
    """Measured choice (scheduler/takeback.py): suspending lows while highs merely fill the limit
    made the lows late and the highs no earlier."""
    sched = await started(slots=4)
    sched.state.admission.upper = 8  # the engine has slots past the running limit
    lows = [sched.submit(seeded(P.LOW, n, max_tokens=60)) for n in range(4)]
    await asyncio.sleep(0.05)
    sched.admission.high_busy = 4.0  # high traffic alone keeps the limit busy
    highs = [sched.submit(seeded(P.HIGH, 10 + n, max_tokens=5)) for n in range(2)]
    assert all(t.request.state.value == "running" for t in (*lows, *highs))
    assert sched.state.taken_back == 0
    await asyncio.gather(*(answer(t) for t in (*lows, *highs)))
    await stop(sched)


async def test_a_high_at_its_share_takes_the_place_of_a_low_running_beside_the_highs():
    """Highs at their share (the batch where the TPOT line reaches the set point) with lows beside
    them: the next high takes the newest low's place, so the batch keeps its size."""
    sched = await started(slots=2)
    sched.state.admission.upper = 8  # the engine has slots to spare: only the share holds the high
    lows = [sched.submit(seeded(P.LOW, n, max_tokens=60)) for n in (1, 2)]
    await asyncio.sleep(0.05)
    highs = [sched.submit(seeded(P.HIGH, 10 + n, max_tokens=30)) for n in range(2)]  # over the limit
    assert sched.state.taken_back == 0 and sched.admission.running == 4
    third = sched.submit(seeded(P.HIGH, 12, max_tokens=5))
    assert third.request.state.value == "running" and sched.admission.running == 4
    assert [t.request.state.value for t in lows] == ["running", "queued"] and sched.state.taken_back == 1
    results = await asyncio.gather(*(answer(t) for t in lows))
    assert (results[1][0], results[1][1]) == await alone(2, max_tokens=60)  # its answer intact
    await asyncio.gather(*(answer(t) for t in (*highs, third)))
    await stop(sched)


async def test_a_request_cancelled_while_its_slot_is_lent_to_high_leaves_nothing_behind():
    sched = await started(slots=1)
    low = sched.submit(seeded(P.LOW, 1, max_tokens=200))
    await asyncio.sleep(0.05)
    high = sched.submit(seeded(P.HIGH, 2, max_tokens=200))
    assert low.request.state.value == "queued"
    sched.cancel(low)
    _, _, events = await answer(low)
    assert isinstance(events[-1], SchedulerError)
    await asyncio.sleep(0)
    assert low.request.key not in sched.queue and low.request.key not in sched.state.tasks
    assert set(sched.engine._sequences) == {high.request.engine_id}
    await stop(sched)


async def test_a_text_completion_keeps_its_slot():
    """Its tokens must be the model's own: a high waits for a slot rather than suspend it."""
    sched = await started(slots=1)
    text = seeded(P.LOW, 1)
    text.params.raw = True
    low = sched.submit(text)
    await asyncio.sleep(0.05)
    high = sched.submit(seeded(P.HIGH, 2, max_tokens=5))
    assert high.request.state.value == "queued" and low.request.state.value == "running"
    assert sched.state.taken_back == 0
    await answer(low)
    await answer(high)
    await stop(sched)


async def test_without_take_back_a_high_waits_for_a_slot_to_end():
    sched = await started(slots=1, take_back=False)
    low = sched.submit(seeded(P.LOW, 1))
    await asyncio.sleep(0.05)
    high = sched.submit(seeded(P.HIGH, 2, max_tokens=5))
    assert high.request.state.value == "queued" and low.request.state.value == "running"
    await answer(low)
    await answer(high)
    await stop(sched)


async def test_a_request_waiting_with_its_slot_given_up_is_never_timed_out_or_displaced():
    """Its answer is half written: past its class's wait limit it still waits its turn."""
    engine = SimEngine(SimConfig(token_latency_ms=10, prefill_ms_per_token=0, natural_stop=False))
    await engine.start()
    limit = LimitConfig(adaptive=False, high_reserve=0.0)
    config = SchedulerConfig(
        max_concurrency=1, max_queue_size=100, limit=limit, max_wait_s=PerClass(high=300, medium=120, low=0.2)
    )
    sched = Scheduler(config, engine)
    await sched.start()
    low = sched.submit(seeded(P.LOW, 1))  # not streamed: its ticket's stream never opens
    await asyncio.sleep(0.05)
    high = sched.submit(seeded(P.HIGH, 2, max_tokens=60))  # 0.6 s: three of the low's wait limits
    assert low.request.suspended
    text, tokens, events = await answer(low)
    assert not any(isinstance(e, SchedulerError) for e in events)
    assert (text, tokens) == await alone(1)
    await answer(high)
    await stop(sched)


async def test_no_slot_is_taken_back_when_the_high_would_not_fit_even_then():
    engine = SimEngine(SimConfig(token_latency_ms=10, prefill_ms_per_token=0, natural_stop=False, kv_tokens=150))
    await engine.start()
    limit = LimitConfig(adaptive=False, high_reserve=0.0)
    sched = Scheduler(SchedulerConfig(max_concurrency=2, max_queue_size=100, limit=limit), engine)
    await sched.start()
    lows = [sched.submit(seeded(P.LOW, n)) for n in (1, 2)]  # 10 + 40 tokens each
    await asyncio.sleep(0.05)
    high = sched.submit(seeded(P.HIGH, 3, max_tokens=120))  # 130: does not fit beside even one low
    assert sched.state.taken_back == 0 and all(t.request.state.value == "running" for t in lows)
    await asyncio.gather(*(answer(t) for t in (*lows, high)))
    await stop(sched)


async def test_shutdown_ends_a_request_waiting_with_its_slot_given_up_once():
    sched = await started(slots=1)
    low = sched.submit(seeded(P.LOW, 1, max_tokens=200))
    await asyncio.sleep(0.05)
    sched.submit(seeded(P.HIGH, 2, max_tokens=200))
    assert low.request.suspended
    await sched.shutdown()
    _, _, events = await answer(low)
    assert [type(e) for e in events if isinstance(e, SchedulerError)] == [SchedulerError]
    assert sched.state.finished[low.request.key]["outcome"] == "shutdown" and not sched.state.tasks
    await sched.engine.stop()


async def test_the_room_given_up_goes_to_the_high_before_an_aged_waiter_of_another_caller():
    clock = FakeClock()
    engine = SimEngine(SimConfig(token_latency_ms=10, prefill_ms_per_token=0, natural_stop=False))
    await engine.start()
    limit = LimitConfig(adaptive=False, high_reserve=0.0)
    sched = Scheduler(SchedulerConfig(max_concurrency=2, max_queue_size=100, limit=limit), engine, clock=clock)
    await sched.start()
    running = [sched.submit(make_request(P.LOW, max_tokens=200, caller=c)) for c in ("a", "r")]
    clock.advance(40)  # the running lows' places have aged past any fresh high
    waiting = sched.submit(make_request(P.LOW, max_tokens=5, caller="c"))
    await asyncio.sleep(0.05)
    high = sched.submit(make_request(P.HIGH, max_tokens=5))
    assert high.request.state.value == "running" and waiting.request.state.value == "queued"
    assert sum(t.request.suspended for t in running) == 1
    await stop(sched)


async def test_a_burst_that_proves_a_step_past_capacity_gives_the_slots_it_was_lent_back():
    sched = await started(slots=2)
    sched.state.admission.upper = 8
    sched.admission.unbounded, sched.admission.burst_cap = True, 8  # the engine alone would serve the load
    lows = [sched.submit(seeded(P.LOW, n, max_tokens=60)) for n in range(5)]
    assert all(t.request.state.value == "running" for t in lows)
    assert [t.request.lent for t in lows] == [False, False, True, True, True]  # started past the limit of 2
    await asyncio.sleep(0.05)
    sched.adjust_limit()  # no fitted TPOT line yet: not a load the engine is known to serve on time
    assert not sched.admission.unbounded
    assert [t.request.state.value for t in lows] == ["running"] * 2 + ["queued"] * 3
    assert sched.state.taken_back == 3 and sched.admission.running == 2
    sched.adjust_limit()
    assert sched.state.taken_back == 3  # at the limit: nobody more
    high = sched.submit(seeded(P.HIGH, 9, max_tokens=5))
    assert high.request.state.value == "running"  # over the limit, as high runs
    for n, (text, tokens, events) in enumerate(await asyncio.gather(*(answer(t) for t in lows))):
        assert (text, tokens) == await alone(n, 60)
        assert sum(isinstance(e, Dispatched) for e in events) == 1
    assert [t.request.resumes for t in lows] == [0, 0, 1, 1, 1]
    await answer(high)
    await stop(sched)


async def test_once_a_bursts_slots_came_back_none_is_lent_again_within_the_demand_window():
    clock = FakeClock(100.0)
    sched = await started(slots=2)
    sched.state.clock = clock
    sched.state.admission.upper = 8
    sched.admission.unbounded, sched.admission.burst_cap = True, 8
    lows = [sched.submit(seeded(P.LOW, n, max_tokens=60)) for n in range(4)]
    await asyncio.sleep(0.05)
    sched.adjust_limit()  # no line yet: the burst's two lent slots come back
    assert sched.state.taken_back == 2
    sched.state.demand.served_on_time = lambda fit, objective_s: True  # type: ignore[method-assign]
    sched.adjust_limit()  # the next interval reads the load as one served on time again...
    assert not sched.admission.unbounded  # ...yet nothing is lent: the load proved too much a second ago
    assert [t.request.state.value for t in lows] == ["running"] * 2 + ["queued"] * 2
    clock.advance(sched.state.config.limit.demand_window_s)
    sched.adjust_limit()
    assert sched.admission.unbounded  # the window over, the load is read afresh
    await asyncio.gather(*(answer(t) for t in lows))
    await stop(sched)


async def test_without_take_back_a_burst_keeps_the_slots_it_was_lent():
    sched = await started(slots=2, take_back=False)
    sched.state.admission.upper = 8
    sched.admission.unbounded, sched.admission.burst_cap = True, 8
    lows = [sched.submit(seeded(P.LOW, n, max_tokens=20)) for n in range(4)]
    await asyncio.sleep(0.05)
    sched.adjust_limit()
    assert all(t.request.state.value == "running" for t in lows) and sched.state.taken_back == 0
    await asyncio.gather(*(answer(t) for t in lows))
    await stop(sched)


async def test_highs_far_over_the_limit_past_the_tpot_objective_take_the_newest_lows_slots():
    """A step from quiet: lows fill the running limit before highs come, highs run over it."""
    sched = await started(slots=4)
    sched.state.admission.upper, sched.admission.high_slots = 16, 8
    lows = [sched.submit(seeded(P.LOW, n, max_tokens=120)) for n in range(4)]
    highs = [sched.submit(seeded(P.HIGH, 10 + n, max_tokens=120)) for n in range(4)]
    assert sched.admission.running == 8  # the highs over the limit of 4
    await asyncio.sleep(0.05)
    sched.state.limit.tpot_s = 0.05  # within the objective (0.1 s): nothing given back
    sched.adjust_limit()
    assert sched.state.taken_back == 0
    sched.state.limit.tpot_s = 0.5  # past it: every high decodes late
    sched.adjust_limit()
    assert [t.request.state.value for t in lows] == ["queued"] * 4 and sched.admission.running == 4
    assert all(t.request.state.value == "running" for t in highs)
    for n, (text, tokens, _) in enumerate(await asyncio.gather(*(answer(t) for t in lows))):
        assert (text, tokens) == await alone(n, 120)  # each goes on where it stopped
    await asyncio.gather(*(answer(t) for t in highs))
    await stop(sched)


async def test_a_burst_of_highs_past_the_limit_takes_the_lows_slots_beside_it_and_none_starts_meanwhile():
    """Highs alone past the running limit, TPOT still within the objective: the lows beside them
    would only slow them. At the limit (highs merely fill it), or on llama.cpp, nothing is given back."""
    sched = await started(slots=4)
    sched.state.admission.upper, sched.admission.high_slots = 16, 8
    lows = [sched.submit(seeded(P.LOW, n, max_tokens=120)) for n in range(3)]
    highs = [sched.submit(seeded(P.HIGH, 10 + n, max_tokens=120)) for n in range(4)]
    await asyncio.sleep(0.05)
    sched.state.limit.tpot_s = 0.05
    sched.adjust_limit()
    assert sched.state.taken_back == 0  # four highs fill the limit of 4
    sched.admission.high_slots = 8  # as their own traffic asks (the step above read no arrivals)
    highs.append(sched.submit(seeded(P.HIGH, 20, max_tokens=120)))
    assert highs[-1].request.state.value == "running" and sched.state.taken_back == 0
    await asyncio.sleep(0.05)
    sched.admission.batched_prefill = False  # llama.cpp: a resumed low would prefill on the decode threads
    sched.adjust_limit()
    assert sched.state.taken_back == 0
    sched.admission.batched_prefill = True
    sched.adjust_limit()
    assert [t.request.state.value for t in lows] == ["queued"] * 3 and sched.state.taken_back == 3
    assert sched.admission.running == 5 and all(t.request.state.value == "running" for t in highs)
    for n, (text, tokens, _) in enumerate(await asyncio.gather(*(answer(t) for t in lows))):
        assert (text, tokens) == await alone(n, 120)
    await asyncio.gather(*(answer(t) for t in highs))
    await stop(sched)
