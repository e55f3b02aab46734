"""The adaptive running limit (pure) and the TPOT it is fed."""

from __future__ import annotations

import pytest

from scheduler.limit import ConcurrencyLimit
from scheduler.pace import PrefillWatch, TokenPace
from settings.schema import LimitConfig

OBJECTIVE = 0.1
TARGET = OBJECTIVE * (1 - LimitConfig().headroom)


def run(limit: ConcurrencyLimit, base_s: float, per_seq_s: float, steps: int, demand: int = 10_000) -> list[int]:
    """Drive the controller against a batch whose TPOT is base + per_seq * running."""
    trace = []
    for _ in range(steps):
        running = min(limit.value, demand)
        limit.update(base_s + per_seq_s * running, running)
        trace.append(limit.value)
    return trace


def knee(base_s: float, per_seq_s: float) -> float:
    return (TARGET - base_s) / per_seq_s


@pytest.mark.parametrize("base_s, per_seq_s", [(0.03, 0.002), (0.03, 0.004), (0.015, 0.0005), (0.05, 0.001)])
def test_converges_to_the_knee_of_the_tpot_curve(base_s, per_seq_s):
    limit = ConcurrencyLimit(LimitConfig(initial=8), OBJECTIVE, upper=512)
    trace = run(limit, base_s, per_seq_s, steps=30)
    assert knee(base_s, per_seq_s) * 0.85 <= trace[-1] <= knee(base_s, per_seq_s) * 1.1
    assert len(set(trace[-10:])) <= 2  # settled, not oscillating


def test_follows_the_knee_when_the_curve_moves():
    limit = ConcurrencyLimit(LimitConfig(initial=8), OBJECTIVE, upper=512)
    for per_seq_s in (0.002, 0.004, 0.001):  # each sequence costs twice as much, then a quarter of that
        run(limit, 0.03, per_seq_s, steps=30)
        assert knee(0.03, per_seq_s) * 0.85 <= limit.value <= knee(0.03, per_seq_s) * 1.1


def test_never_passes_the_upper_bound_and_starts_below_it():
    limit = ConcurrencyLimit(LimitConfig(initial=8), OBJECTIVE, upper=32)
    assert limit.value == 8
    assert run(limit, 0.01, 0.0001, steps=20)[-1] == 32  # a GPU: the knee is far past the engine's slots
    limit.set_upper(4)
    assert limit.value == 4
    assert ConcurrencyLimit(LimitConfig(initial=8), OBJECTIVE, upper=3).value == 3


def test_what_clients_saw_over_the_objective_cuts_a_busy_limit_and_stops_its_growth():
    """llama.cpp at 1x: the prefill-free gaps read 0.05-0.07 s with 9-12 running while every gap,
    what clients saw, read 0.09-0.16 s; the limit kept 16 or grew, and at a step to 1.5x lows
    filled it and decoded past the objective."""
    clean, seen = (ConcurrencyLimit(LimitConfig(initial=16), OBJECTIVE, upper=64) for _ in range(2))
    for limit in (clean, seen):
        for _ in range(2):
            limit.update(0.016, 2)  # alone
    for _ in range(6):
        clean.update(0.05, 10)
        seen.update(0.05, 10, seen_s=0.14)
    assert clean.value > 16  # the clean gaps alone read room
    assert 7 <= seen.value < 16  # towards 10 x 0.1 / 0.14
    light = ConcurrencyLimit(LimitConfig(initial=16), OBJECTIVE, upper=64)
    for _ in range(6):
        light.update(0.03, 3, seen_s=0.4)  # a few prompts at light load: not the batch's doing
    assert light.value == 16
    slow = ConcurrencyLimit(LimitConfig(initial=16), OBJECTIVE, upper=512)
    for _ in range(60):  # 0.21 s a token alone, prefills adding a fifth: the objective is out of reach
        running = slow.value
        tpot = 0.2 + 0.01 * running
        slow.update(tpot, running, seen_s=1.2 * tpot)
    assert slow.value >= 4  # cut, not starved to one sequence


def test_does_not_grow_while_the_load_leaves_the_limit_unused():
    limit = ConcurrencyLimit(LimitConfig(initial=20), OBJECTIVE, upper=512)
    run(limit, 0.03, 0.0001, steps=20, demand=3)
    assert limit.value == 20
    limit.update(None, 0)  # nothing decoded: hold
    assert limit.value == 20


def test_an_engine_too_slow_for_the_objective_is_not_starved_to_one_sequence():
    limit = ConcurrencyLimit(LimitConfig(initial=16), OBJECTIVE, upper=512)
    trace = run(limit, 0.2, 0.01, steps=40)  # 0.21 s per token alone: the objective is out of reach
    assert min(trace) <= 4  # it backed off, saw the engine (nearly) alone...
    assert trace[-1] >= 8 and len(set(trace[-20:])) == 1  # ...and settled where the floor holds it


def test_an_engine_that_slows_for_good_is_read_alone_again_and_not_starved():
    limit = ConcurrencyLimit(LimitConfig(initial=16), OBJECTIVE, upper=512)
    run(limit, 0.02, 0.002, steps=40)
    limit.update(0.022, 1)  # seen alone while fast
    trace = run(limit, 0.12, 0.002, steps=60)  # now slower alone than the objective
    assert limit.alone_s > 0.1 and trace[-1] >= 8 and len(set(trace[-10:])) == 1


def test_a_machine_that_slows_to_the_objective_under_load_keeps_a_handful_running():
    limit = ConcurrencyLimit(LimitConfig(initial=16), OBJECTIVE, upper=512)
    limit.update(0.03, 1)  # seen alone while fast
    run(limit, 0.03, 0.002, steps=30)
    trace = run(limit, 0.095, 0.001, steps=60)  # now nearly the objective alone, with queued work throughout
    assert min(trace[10:]) >= 3 and trace[-1] >= 6
    assert max(trace[-20:]) - min(trace[-20:]) <= 1  # settled, not dithering between floor and none


def test_a_slow_reading_with_a_few_running_does_not_lift_a_limit_with_room():
    limit = ConcurrencyLimit(LimitConfig(initial=20), OBJECTIVE, upper=512)
    for _ in range(2):
        limit.update(0.085, 3)  # light load while requests arrive: their prefills slow the few running
    assert limit.alone_s == 0.085 and limit.target_s == limit.set_point_s


def test_a_fresh_engines_first_slow_reading_waits_for_a_second():
    """llama.cpp's first interval after start read 2.57 s with 4 running, then 0.09 and 0.02 s:
    taken at once it cut the limit from 16 to 1 in six seconds, and the TPOT line fitted through
    it (-1.0 + 0.6 n) held every burst to one sequence for a minute."""
    limit = ConcurrencyLimit(LimitConfig(initial=16), OBJECTIVE, upper=64)
    assert limit.update(2.57, 4) == 16 and limit.tpot_s is None and limit.counted_s is None
    limit.update(0.09, 3.2)
    assert limit.tpot_s == pytest.approx(0.09) and limit.counted_s == pytest.approx(0.09)
    for _ in range(4):
        limit.update(0.024, 3)
    assert limit.value >= 14


def test_the_pace_also_reads_every_gap_as_clients_saw_it():
    pace = TokenPace()
    pace.record(0.05, 1, 8)
    pace.record(0.25, 1, 8, during_prefill=True)
    assert pace.take()[0] == pytest.approx(0.05) and pace.seen_s == pytest.approx(0.15)
    pace.take()
    assert pace.seen_s is None  # nothing decoded


def test_a_stall_counts_only_when_the_next_reading_confirms_it_and_then_at_three_times_at_most():
    limit = ConcurrencyLimit(LimitConfig(initial=16), OBJECTIVE, upper=64)
    run(limit, 0.06, 0.0, steps=10)
    before = limit.value, limit.tpot_s
    assert limit.update(1.5, 16) == before[0] and limit.tpot_s == before[1]  # a lone stall: not read
    assert limit.counted_s is None  # nor put on the TPOT line
    limit.update(1.5, 16)  # confirmed: a burst of prompts prefilling across two intervals
    assert limit.counted_s is None  # a step for the limit, prompts' prefills for the line
    assert limit.tpot_s == pytest.approx(before[1] + 0.3 * 2 * before[1])  # read as three times, not 25
    assert limit.value >= 0.6 * before[0]


def test_an_interval_read_over_the_target_never_grows_the_limit():
    """A fresh server stepped to 5x capacity on llama.cpp: TPOT read 0.03 s with a few running,
    then 0.126 s twice with 22. Counted at three times the smoothed figure, the confirmed stall
    still left that figure under the target, and the limit grew from 18 to 31 while every high
    decoded at 0.2-0.3 s."""
    limit = ConcurrencyLimit(LimitConfig(initial=18), OBJECTIVE, upper=64)
    limit.update(0.029, 3)
    limit.update(0.029, 3)
    before = limit.value
    limit.update(0.126, 22)  # a lone stall, so far
    limit.update(0.126, 22)  # confirmed
    assert limit.tpot_s < TARGET and limit.value <= before


def test_stalls_every_other_interval_are_the_engines_pace_not_lone_stalls():
    """Prefill-heavy intervals between clean ones, as at a step to 5x capacity: read each time,
    the limit falls; dropped as lone, it grew on the clean ones alone."""
    limit = ConcurrencyLimit(LimitConfig(initial=16), OBJECTIVE, upper=64)
    run(limit, 0.06, 0.0, steps=10)
    before = limit.value
    for _ in range(4):
        limit.update(0.25, 16)
        limit.update(0.06, 16)
    assert limit.tpot_s > TARGET and limit.value < before


def test_idle_intervals_age_the_stall_memory():
    limit = ConcurrencyLimit(LimitConfig(initial=16), OBJECTIVE, upper=64)
    run(limit, 0.03, 0.0, steps=10)
    before = limit.value, limit.tpot_s
    limit.update(0.5, 4)  # a lone stall
    for _ in range(10):
        limit.update(None, 0)  # nothing decoded: idle
    assert limit.update(0.5, 4) == before[0] and limit.tpot_s == before[1]  # another lone one, long after


def test_fixed_when_not_adaptive():
    limit = ConcurrencyLimit(LimitConfig(adaptive=False, initial=8), OBJECTIVE, upper=64)
    assert run(limit, 0.5, 0.1, steps=5) == [64] * 5
    assert limit.tpot_s is not None  # still measured and reported


def test_pace_is_the_token_weighted_gap_per_interval():
    pace = TokenPace()
    assert pace.take() == (None, 0.0)
    pace.record(0.2, 2, running=4)  # two tokens in one output: 0.1 s each
    pace.record(0.1, 1, running=7)
    pace.record(5.0, 0, running=7)  # an empty final output carries no token
    tpot, running = pace.take()
    assert tpot == pytest.approx(0.1) and running == pytest.approx(5.0)
    assert pace.take() == (None, 0.0)


def test_pace_gives_the_mean_tpot_between_two_moments():
    pace = TokenPace()
    pace.record(0.5, 1, running=1)
    mark = pace.mark()
    assert pace.since(mark) is None
    pace.record(0.2, 2, running=2)
    pace.take()  # the control interval's reset leaves the running totals
    pace.record(0.4, 2, running=2)
    assert pace.since(mark) == pytest.approx(0.15)


def test_pace_reads_only_the_gaps_without_a_prefill_unless_prefills_left_too_few():
    pace = TokenPace()
    mark = pace.mark()
    pace.record(0.15, 3, running=8)
    pace.record(0.35, 1, running=8, during_prefill=True)  # a prompt's prefill stalled this step
    assert pace.take() == (pytest.approx(0.05), pytest.approx(8.0))
    assert pace.since(mark) == pytest.approx(0.05)
    for _ in range(4):  # a burst of prompts: one clean token in five says little, so no reading...
        pace.record(0.05, 1, running=4)
        pace.record(0.3, 4, running=10, during_prefill=True)
        assert pace.take() == (None, 0.0)
    pace.record(0.05, 1, running=4)
    pace.record(0.3, 4, running=10, during_prefill=True)
    tpot, running = pace.take()  # ...until it lasts: an engine that is always prefilling is read in full
    assert tpot == pytest.approx(0.35 / 5) and running == pytest.approx(8.8)


def test_prefill_watch_knows_whether_a_gap_held_a_prefill():
    watch = PrefillWatch()
    assert not watch.overlaps(since=0.0)
    watch.ended(now=10.5)  # a first token: its prompt's prefill stretched the step that ended here
    assert watch.overlaps(since=10.0) and not watch.overlaps(since=10.5)


SPREAD = [0.85, 0.9, 0.95, 1.0, 1.0, 1.05, 1.1, 1.15, 1.2, 0.95]  # requests' own TPOT around the batch's


def run_with_requests(limit: ConcurrencyLimit, spread: list[float], steps: int, demand: int = 10_000) -> list[float]:
    """As `run`, and each interval four requests finish with their own TPOT spread around the batch's."""
    own: list[float] = []
    for step in range(steps):
        running = min(limit.value, demand)
        tpot = 0.03 + 0.002 * running
        limit.update(tpot, running)
        for i in range(4):
            own.append(tpot * spread[(4 * step + i) % len(spread)])
            limit.finished(own[-1], tpot)
    return own


def on_time(tpots: list[float]) -> float:
    return sum(t <= OBJECTIVE for t in tpots) / len(tpots)


def test_set_point_trims_down_until_most_requests_own_tpot_meets_the_objective():
    fixed = ConcurrencyLimit(LimitConfig(initial=8, on_time_share=0), OBJECTIVE, upper=512)
    assert on_time(run_with_requests(fixed, SPREAD, steps=200)[-400:]) < 0.75  # the mean is met, a third miss
    limit = ConcurrencyLimit(LimitConfig(initial=8), OBJECTIVE, upper=512)
    own = run_with_requests(limit, SPREAD, steps=200)
    assert on_time(own[-400:]) >= 0.85
    assert limit.set_point_s < fixed.set_point_s and limit.value < fixed.value


def test_set_point_rises_when_requests_tpot_barely_spreads():
    limit = ConcurrencyLimit(LimitConfig(initial=8), OBJECTIVE, upper=512)
    own = run_with_requests(limit, [0.98, 1.0, 1.02], steps=200)
    assert limit.set_point_s > OBJECTIVE * (1 - LimitConfig().headroom)
    assert limit.value > knee(0.03, 0.002)  # more running than the fixed headroom allowed...
    assert on_time(own[-400:]) >= 0.85  # ...and still on time


def test_set_point_holds_while_the_load_leaves_the_limit_unused():
    limit = ConcurrencyLimit(LimitConfig(initial=20), OBJECTIVE, upper=512)
    start = limit.set_point_s
    run_with_requests(limit, [0.5], steps=30, demand=3)  # light load: fast requests say nothing of the knee
    assert limit.set_point_s == start


def test_a_slow_spell_of_the_whole_batch_leaves_the_set_point_alone():
    limit = ConcurrencyLimit(LimitConfig(initial=20), OBJECTIVE, upper=512)
    run_with_requests(limit, [1.0], steps=40)
    start = limit.set_point_s
    for _ in range(30):  # every token slows, for reasons the batch does not explain: requests move with it
        limit.update(0.13, limit.value)
        limit.finished(0.13, 0.13)
    assert limit.set_point_s >= start


def test_once_the_engine_was_seen_alone_a_cut_limit_grows_back_in_a_few_steps():
    base_s, per_seq_s = 0.05, 0.0015  # a CPU: most of a step is fixed cost; the knee is at 26
    slow = ConcurrencyLimit(LimitConfig(initial=8), OBJECTIVE, upper=512)
    fast = ConcurrencyLimit(LimitConfig(initial=8), OBJECTIVE, upper=512)
    fast.update(base_s + per_seq_s, 1)
    steps_slow, steps_fast = run(slow, base_s, per_seq_s, steps=40), run(fast, base_s, per_seq_s, steps=40)
    reached = [
        next(i for i, value in enumerate(trace) if value >= 0.85 * knee(base_s, per_seq_s))
        for trace in (steps_slow, steps_fast)
    ]
    assert reached[1] <= 5 < reached[0]
    assert knee(base_s, per_seq_s) * 0.85 <= steps_fast[-1] <= knee(base_s, per_seq_s) * 1.1
    assert len(set(steps_fast[-10:])) <= 2


def test_the_engine_alone_is_read_from_the_reading_not_the_smoothed_figure():
    limit = ConcurrencyLimit(LimitConfig(initial=30), OBJECTIVE, upper=512)
    run(limit, 0.03, 0.002, steps=20)  # a busy batch near the set point
    limit.update(0.035, 2)  # the load drains: two sequences left
    assert limit.alone_s == 0.035 and limit.target_s == limit.set_point_s  # no floor from the batch before


@pytest.mark.parametrize("line_knee", [None, 8, 0])
def test_one_low_reading_grows_the_limit_no_further_than_the_fitted_line_allows(line_knee):
    """A step to 5x on llama.cpp: with 7 running, one interval's prefill-free gaps read 0.065 s
    where the line fitted to the last minute read 0.079 s (its knee at 8)."""
    limit = ConcurrencyLimit(LimitConfig(initial=4), OBJECTIVE, upper=32)
    limit.update(0.025, 2)
    limit.update(0.025, 2)  # seen alone: 0.025 s
    for _ in range(6):
        limit.update(0.065, min(7, limit.value), line_knee=line_knee)
    if line_knee is None:
        assert limit.value >= 10  # the reading's own knee: 7 x (0.09 - 0.025) / (0.065 - 0.025) = 11
    elif line_knee:
        assert 7 <= limit.value <= 8
    else:  # the line reads the engine over the target alone: no room to grow into
        assert limit.value == 4
