"""Admission, pressure, wait estimates and priority resolution: pure policies, no event loop."""

import math

import pytest

from scheduler.admission import AdmissionController
from scheduler.door import wait_refusal
from scheduler.estimate import MIN_SPAN_S, STEP_MIN, STEP_S, SURGE_S, ArrivalRates, DrainEstimator
from scheduler.high_demand import HighDemand
from scheduler.pressure import PressureMonitor
from scheduler.priority import PriorityInput, PriorityInputError, resolve_priority
from scheduler.request import PriorityClass as P
from scheduler.request import RequestKey
from settings.schema import PressureConfig, SchedulerConfig
from tests.scheduler.factory import make_request


def test_high_counts_only_its_own_class_against_the_limit():
    adm = AdmissionController(max_concurrency=20, token_budget=10_000, high_reserve=0.1, upper=30)
    assert (
        adm.slots_for(P.LOW, high_waiting=True),
        adm.slots_for(P.MEDIUM, high_waiting=True),
        adm.slots_for(P.HIGH),
    ) == (18, 18, 20)
    for _ in range(18):
        adm.admit(make_request(P.LOW))
    assert not adm.fits(make_request(P.LOW), high_waiting=True) and adm.fits(make_request(P.HIGH))
    assert adm.fits(make_request(P.LOW))  # with no high waiting, the share kept for high is lent
    for _ in range(2):
        adm.admit(make_request(P.LOW))
    assert not adm.fits(make_request(P.LOW)) and adm.fits(make_request(P.HIGH))  # taken back by running over
    adm.max_concurrency = 10  # the limit just shrank under what runs: high still starts, the others wait
    assert adm.fits(make_request(P.HIGH)) and not adm.fits(make_request(P.MEDIUM))
    for _ in range(10):
        adm.admit(make_request(P.HIGH))
    assert not adm.fits(make_request(P.HIGH))  # high alone fills the limit
    assert adm.running == 30 and not adm.fits(make_request(P.HIGH))  # never past the engine's slots
    assert AdmissionController(max_concurrency=1, token_budget=100, high_reserve=0.5).slots_for(P.LOW) == 1


def test_lower_classes_never_fill_the_engines_last_slots():
    adm = AdmissionController(max_concurrency=16, token_budget=None, high_reserve=0.1, upper=16)
    assert adm.slots_for(P.LOW) == 15 and adm.slots_for(P.HIGH) == 16  # one of llama.cpp's 16 slots stays free
    for _ in range(15):
        adm.admit(make_request(P.LOW))
    assert not adm.fits(make_request(P.LOW)) and adm.fits(make_request(P.HIGH))
    assert AdmissionController(max_concurrency=16, token_budget=None, upper=16).slots_for(P.LOW) == 16  # no reserve


def test_the_door_refuses_lower_classes_when_high_traffic_alone_keeps_the_limit_busy():
    adm = AdmissionController(max_concurrency=10, token_budget=None, high_reserve=0.1, upper=16)
    adm.high_busy = 8.9
    assert not adm.high_fills_limit()
    adm.high_busy = 9.0
    assert adm.high_fills_limit()
    assert not adm.held_for_high(high_waiting=False)  # the rate remembers highs that are gone: lows may start
    assert adm.held_for_high(high_waiting=True)
    for _ in range(5):
        adm.admit(make_request(P.HIGH))
    assert adm.held_for_high(high_waiting=False)  # highs hold half the limit and more come


def test_highs_running_fill_the_limit_before_their_arrival_rate_shows_it():
    adm = AdmissionController(max_concurrency=10, token_budget=None, high_reserve=0.1, upper=16)
    adm.high_busy = 2.0  # a step to several times capacity: the rate has seen only its first seconds
    for _ in range(8):
        adm.admit(make_request(P.HIGH))
    assert not adm.held_for_high(high_waiting=True)
    adm.admit(make_request(P.HIGH))
    assert adm.held_for_high(high_waiting=False)
    assert not adm.high_fills_limit()  # the door goes by the rate: a moment's highs refuse no low


def test_high_may_hold_the_slots_its_own_traffic_keeps_busy_above_a_fallen_limit():
    adm = AdmissionController(max_concurrency=3, token_budget=None, upper=8)
    adm.high_slots = 5
    for _ in range(5):
        assert adm.fits(make_request(P.HIGH))
        adm.admit(make_request(P.HIGH))
    assert not adm.fits(make_request(P.HIGH)) and not adm.has_any_slot()
    adm.high_slots = 20
    assert adm.slots_for(P.HIGH) == 8 and adm.slots_for(P.LOW) == 3  # the engine's slots bound it; low keeps the limit
    adm.high_cap = 6  # the TPOT line reaches the objective at 6: past it every high would miss
    assert adm.slots_for(P.HIGH) == 6
    adm.high_cap = 1
    assert adm.slots_for(P.HIGH) == 3  # never under the running limit itself


def test_high_demand_is_rate_times_service_at_the_objective_plus_its_spread():
    demand = HighDemand()
    assert demand.slots(2.0) == 0  # nothing finished yet: no estimate
    demand.finished(first_token_s=0.5, decoded=15, target_tpot_s=0.1)  # 2 s in the engine at the objective
    assert demand.slots(0.0) == 0
    assert demand.slots(2.0) == math.ceil(4 + 2.33 * 2)  # 4 in the engine on average, 99 % under 9
    for _ in range(50):
        demand.finished(first_token_s=0.2, decoded=8, target_tpot_s=0.1)  # shorter answers now
    assert demand.service_s == pytest.approx(1.0, rel=0.01) and demand.slots(2.0) == math.ceil(2 + 2.33 * 2**0.5)


def test_arrival_rate_of_one_class():
    rates = ArrivalRates(window_s=30.0)
    for i in range(20):
        rates.record(P.HIGH if i % 4 == 0 else P.LOW, 100.0 + i)
    assert rates.of(P.HIGH, now=120.0) == pytest.approx(5 / 20) and rates.of(P.MEDIUM, now=120.0) == 0.0


def test_a_surge_counts_within_seconds_and_a_lull_only_over_the_window():
    rates = ArrivalRates(window_s=30.0)
    for i in range(3):
        rates.record(P.HIGH, float(i))  # traffic long ago, then quiet: the window holds the quiet spell
    for i in range(60):
        rates.record(P.HIGH, 100.0 + i / 6)  # 6 a second from t=100
    assert rates.of(P.HIGH, now=109.95) == pytest.approx(60 / SURGE_S)  # not 60 / 30
    assert rates.of(P.HIGH, now=125.0) == pytest.approx(60 / 30)  # after it: the window's rate


def test_a_step_is_read_in_full_within_seconds_and_a_cluster_at_light_load_is_not():
    rates = ArrivalRates(window_s=30.0)
    for i in range(15):
        rates.record(P.HIGH, 70.0 + i * 2)  # half a second apart for half a minute...
    for i in range(8):
        rates.record(P.HIGH, 100.0 + i / 3)  # ...then 3 a second from t=100 (5x capacity, 20 % high)
    assert rates.of(P.HIGH, now=102.5) == pytest.approx(8 / STEP_S)  # not 8 / SURGE_S over the quiet before
    assert rates.above(P.LOW, now=102.5) == pytest.approx(8 / STEP_S)  # the door reads it as `of` does
    assert rates.above(P.HIGH, now=102.5) == 0.0
    cluster = ArrivalRates(window_s=30.0)
    for i in range(30):
        cluster.record(P.HIGH, 70.0 + i)  # 1 a second...
    for i in range(STEP_MIN - 1):
        cluster.record(P.HIGH, 100.0 + i * 0.4)  # ...and one cluster short of a step
    assert cluster.of(P.HIGH, now=102.5) == pytest.approx((7 + STEP_MIN - 1) / SURGE_S)  # its last 10 s
    steady = ArrivalRates(window_s=30.0)
    for i in range(90):
        steady.record(P.HIGH, 70.0 + i / 3)  # 3 a second throughout: its last 3 s are no step
    assert steady.of(P.HIGH, now=100.0) == pytest.approx(90 / 30)


def test_no_lower_request_starts_while_a_high_one_waits_for_its_first_token():
    adm = AdmissionController(max_concurrency=8, token_budget=None)
    high, other_high = make_request(P.HIGH), make_request(P.HIGH)
    adm.admit(high)
    assert not adm.fits(make_request(P.LOW)) and adm.fits(other_high) and adm.has_any_slot()
    adm.admit(other_high)
    assert adm.first_token(high.key) and not adm.first_token(high.key)
    assert not adm.fits(make_request(P.MEDIUM))  # the other is still in its prefill
    adm.release(other_high.key)  # failed before its first token
    assert adm.fits(make_request(P.MEDIUM)) and not adm.first_token(make_request(P.LOW).key)


def test_lower_requests_prefill_one_at_a_time_where_the_engine_prefills_serially():
    adm = AdmissionController(max_concurrency=8, token_budget=None, lower_prefills=1)
    low, medium, high = make_request(P.LOW), make_request(P.MEDIUM), make_request(P.HIGH)
    adm.admit(low)
    assert adm.fits(medium)  # no high traffic: nothing to make way for
    adm.high_traffic = True
    assert not adm.fits(medium) and adm.fits(high) and adm.has_any_slot()
    assert adm.first_token(low.key) and adm.fits(medium)
    adm.admit(medium)
    adm.release(medium.key)  # failed before its first token
    assert adm.fits(make_request(P.LOW))
    unlimited = AdmissionController(max_concurrency=8, token_budget=None)
    unlimited.admit(low)
    assert unlimited.fits(medium) and not unlimited.first_token(low.key)


def test_a_burst_the_engine_serves_on_time_prefills_four_lower_prompts_at_a_time_while_highs_come():
    adm = AdmissionController(max_concurrency=4, token_budget=None, upper=32, lower_prefills=1)
    adm.unbounded, adm.burst_cap, adm.high_traffic = True, 32, True
    lows = [make_request(P.LOW) for _ in range(5)]
    for low in lows[:4]:
        assert adm.fits(low)
        adm.admit(low)
    assert not adm.fits(lows[4]) and adm.fits(make_request(P.HIGH))  # a high prefills beside four at most
    assert adm.first_token(lows[0].key) and adm.fits(lows[4])
    adm.high_traffic = False
    adm.admit(lows[4])
    assert adm.fits(make_request(P.LOW))  # no high to make way for: the whole burst at once


def test_a_burst_prefills_one_lower_prompt_at_a_time_where_prompts_gain_nothing_from_sharing_a_step():
    adm = AdmissionController(max_concurrency=4, token_budget=None, upper=32, lower_prefills=1)
    adm.unbounded, adm.burst_cap, adm.high_traffic, adm.batched_prefill = True, 32, True, False
    low, second = make_request(P.LOW), make_request(P.LOW)
    adm.admit(low)
    assert adm.burst_prefills == 1 and not adm.fits(second) and adm.fits(make_request(P.HIGH))
    assert adm.first_token(low.key) and adm.fits(second)
    adm.high_traffic = False
    adm.admit(second)
    assert adm.fits(make_request(P.LOW))  # no high to make way for: the whole burst at once


def test_batch_lines_alone_prefill_at_once_and_beside_interactive_ones_as_lower_prompts_do():
    adm = AdmissionController(max_concurrency=4, token_budget=None, upper=32, lower_prefills=1)
    adm.background_slots, adm.high_traffic = 32, True  # a high came in the last five minutes, none runs
    lines = [make_request(P.LOW, background=True) for _ in range(10)]
    for line in lines[:8]:
        assert adm.fits(line)  # an interactive arrival would preempt the newest: no need to wait
        adm.admit(line)
    high = make_request(P.HIGH)
    assert adm.fits(high)
    adm.admit(high)
    assert not adm.fits(lines[8])  # a high prefilling: no lower prompt beside it
    for started in (high, *lines[:8]):
        adm.first_token(started.key)
    assert adm.fits(lines[8])
    adm.admit(lines[8])
    assert not adm.fits(lines[9])  # beside a high, one lower prefill at a time


def test_admission_by_slots_and_tokens():
    adm = AdmissionController(max_concurrency=2, token_budget=100)
    a, b, c = (make_request(prompt_tokens=20, max_tokens=20) for _ in range(3))
    assert adm.fits(a)
    adm.admit(a)
    adm.admit(b)
    assert adm.tokens_in_use == 80 and adm.free_slots == 0
    assert not adm.fits(c)  # no slot
    adm.release(a.key)
    assert adm.fits(c)
    big = make_request(prompt_tokens=30, max_tokens=31)
    assert not adm.fits(big)  # 40 + 61 > 100: the budget, not the slot, says no
    assert adm.can_ever_fit(big) and not adm.can_ever_fit(make_request(prompt_tokens=50, max_tokens=51))
    adm.paused = True
    assert not adm.fits(c)
    adm.release(RequestKey("anonymous", "unknown"))  # releasing twice or unknown ids is harmless
    assert adm.tokens_in_use == 40


def test_an_engine_without_a_local_budget_is_admitted_by_slots_only():
    adm = AdmissionController(max_concurrency=2, token_budget=None)
    huge = make_request(prompt_tokens=10**6, max_tokens=10**6)
    assert adm.can_ever_fit(huge) and adm.fits(huge)
    adm.admit(huge)
    adm.admit(make_request())
    assert not adm.fits(make_request())  # the slots still count


def test_pressure_enters_and_leaves_emergency():
    mon = PressureMonitor(PressureConfig(avg_wait_s=3, high_waiting=3, high_boost=1.5, low_max_wait_s=20), 1.5)
    assert not mon.sample(avg_wait_s=2.9, high_waiting=2)
    assert mon.max_wait_s(P.HIGH, 300) == 300
    assert mon.sample(avg_wait_s=3.1, high_waiting=0) and mon.emergency
    assert mon.weight(P.HIGH, 10) == 15 and mon.weight(P.MEDIUM, 5) == 5
    assert mon.max_wait_s(P.LOW, 60) == 20 and mon.max_wait_s(P.MEDIUM, 60) == 60
    assert mon.max_wait_s(P.HIGH, 300) == 1.5  # the first-token objective...
    assert mon.max_wait_s(P.HIGH, 300, high_start_s=0.5) == 1.0  # ...less what a started high takes to its first token
    assert not mon.sample(avg_wait_s=0, high_waiting=3)  # still under pressure
    assert mon.sample(avg_wait_s=0, high_waiting=2) and not mon.emergency
    assert mon.switches == 2 and mon.max_wait_s(P.LOW, 60) == 60 and mon.max_wait_s(P.HIGH, 300) == 300
    assert PressureMonitor(PressureConfig(high_max_wait_s=4), 1.0).max_wait_s(P.HIGH, 300, 0.5) == 300  # not pressed
    mon = PressureMonitor(PressureConfig(high_max_wait_s=4), 1.0)
    assert mon.sample(avg_wait_s=10, high_waiting=0) and mon.max_wait_s(P.HIGH, 300, 0.5) == 4


def test_a_refusal_names_a_limit_left_by_the_first_token_in_plain_seconds():
    refusal = wait_refusal(make_request(P.HIGH), 2.0, 1.0 - 0.316851)  # slo.ttft_s less a start's first token
    assert refusal is not None and "about 2.0 s, past its limit of 0.683 s" in refusal.message
    refusal = wait_refusal(make_request(P.HIGH), 0.49, 0.465)
    assert refusal is not None and "about 0.5 s, past its limit of 0.465 s" in refusal.message
    refusal = wait_refusal(make_request(P.LOW), 45.4, 30.0)
    assert refusal is not None and "about 45 s" in refusal.message
    refusal = wait_refusal(make_request(P.LOW), 20.4, 20.0)
    assert refusal is not None and "about 20.4 s, past its limit of 20 s" in refusal.message
    assert wait_refusal(make_request(P.HIGH), 0.5, 0.683149) is None


def test_drain_estimates():
    est = DrainEstimator()
    assert est.wait_s(3, parallel=2) is None and est.retry_after_s(10, parallel=2) == 1
    for s in (1.0, 3.0):
        est.record(s)
    assert est.rate(parallel=4) == 2.0  # 4 running / 2 s mean service
    assert est.wait_s(0, parallel=4) == 0.0
    assert est.wait_s(5, parallel=4) == 2.5
    assert est.retry_after_s(ahead=6, parallel=4) == 4  # ceil(7 / 2)


def test_a_flood_of_a_higher_class_is_seen_within_seconds():
    rates = ArrivalRates(window_s=30.0)
    for i in range(80):
        rates.record(P.HIGH, 100.0 + i * 0.025)  # 40 a second
    assert rates.above(P.MEDIUM, now=102.0) == pytest.approx(80 / MIN_SPAN_S)  # not 80 / 30
    assert rates.above(P.HIGH, now=102.0) == 0.0
    est = DrainEstimator()
    est.record(0.64)  # 8 slots: 12.5 a second
    assert math.isinf(est.wait_s(1, parallel=8, jumpers_per_s=rates.above(P.MEDIUM, now=102.0)))
    assert rates.above(P.LOW, now=160.0) == 0.0  # the window has passed


CFG = SchedulerConfig()


@pytest.mark.parametrize(
    "given, expected",
    [
        (PriorityInput(), (P.MEDIUM, 5.0)),
        (PriorityInput(header="HIGH"), (P.HIGH, 10.0)),
        (PriorityInput(unnamed=P.LOW), (P.LOW, 1.0)),  # background work
        (PriorityInput(unnamed=P.LOW, key_class=P.HIGH), (P.HIGH, 10.0)),
        (PriorityInput(header="low", key_class=P.HIGH), (P.LOW, 1.0)),
        (PriorityInput(key_class=P.HIGH, body="low"), (P.HIGH, 10.0)),
        (PriorityInput(body="low"), (P.LOW, 1.0)),
        (PriorityInput(body=7), (P.MEDIUM, 7.0)),
        (PriorityInput(body=10), (P.HIGH, 10.0)),
        (PriorityInput(body=0), (P.LOW, 0.0)),
        (PriorityInput(header="high", batch=True), (P.LOW, 1.0)),
        (PriorityInput(max_tokens=64, temperature=0), (P.MEDIUM, 7.5)),
        (PriorityInput(max_tokens=65, temperature=0), (P.MEDIUM, 5.0)),
        (PriorityInput(max_tokens=10, temperature=0.2), (P.MEDIUM, 5.0)),
        (PriorityInput(max_tokens=10), (P.MEDIUM, 5.0)),
        (PriorityInput(key_class=P.LOW, ceiling=P.LOW), (P.LOW, 1.0)),
        (PriorityInput(header="high", key_class=P.LOW, ceiling=P.LOW), (P.LOW, 1.0)),
        (PriorityInput(body=10, key_class=P.MEDIUM, ceiling=P.MEDIUM), (P.MEDIUM, 5.0)),
        (PriorityInput(header="low", key_class=P.MEDIUM, ceiling=P.MEDIUM), (P.LOW, 1.0)),
        (
            PriorityInput(header="high", key_class=P.MEDIUM, ceiling=P.MEDIUM, max_tokens=8, temperature=0),
            (P.MEDIUM, 7.5),
        ),
    ],
)
def test_priority_sources_in_order(given, expected):
    assert resolve_priority(given, CFG) == expected


@pytest.mark.parametrize(
    "given, param",
    [
        (PriorityInput(header="urgent"), "X-Priority"),
        (PriorityInput(body="urgent"), "priority"),
        (PriorityInput(body=11), "priority"),
        (PriorityInput(body=-1), "priority"),
        (PriorityInput(body=True), "priority"),
    ],
)
def test_bad_priority_names_the_parameter(given, param):
    with pytest.raises(PriorityInputError) as err:
        resolve_priority(given, CFG)
    assert err.value.param == param


def test_admission_rounds_costs_up_to_whole_kv_blocks():
    adm = AdmissionController(max_concurrency=8, token_budget=512, block_size=128)
    small = make_request(prompt_tokens=10, max_tokens=10)  # 20 tokens still take a whole block
    assert adm.cost(small) == 128
    for _ in range(4):
        r = make_request(prompt_tokens=10, max_tokens=10)
        assert adm.fits(r)
        adm.admit(r)
    assert adm.tokens_in_use == 512 and not adm.fits(small)
    assert adm.cost(make_request(prompt_tokens=100, max_tokens=29)) == 256


def test_overridden_priority_values_are_still_validated():
    with pytest.raises(PriorityInputError):
        resolve_priority(PriorityInput(key_class=P.HIGH, body=99), CFG)
    with pytest.raises(PriorityInputError):
        resolve_priority(PriorityInput(header="urgent", batch=True), CFG)
