"""Background work's share of the engine: the fitted TPOT line and the slots it allows."""

from __future__ import annotations

import pytest

from scheduler.background import BackgroundShare
from scheduler.demand import Demand
from scheduler.tpot_line import TpotLine


def fed(alone: float, slope: float, counts=range(1, 17)) -> TpotLine:
    line = TpotLine()
    for n in counts:
        line.add(n, alone + slope * n)
    return line


def test_the_line_recovers_tpot_alone_and_the_cost_of_each_sequence() -> None:
    alone, slope = fed(0.02, 0.005).fit()
    assert alone == pytest.approx(0.02) and slope == pytest.approx(0.005)


@pytest.mark.parametrize(
    "alone, slope, running, extra",
    [
        (0.02, 0.005, 4, 0),  # a CPU: each sequence costs a quarter of TPOT alone; 10 % buys none
        (0.02, 0.001, 4, 2),  # 0.1 x 0.024 / 0.001
        (0.03, 0.0005, 20, 8),  # a GPU: decode is memory-bound, a sequence costs almost nothing
    ],
)
def test_extra_sequences_within_a_slowdown(alone: float, slope: float, running: int, extra: int) -> None:
    assert fed(alone, slope).extra_within(running, 0.1) == extra


def test_unknown_cost_allows_nothing_and_no_measurable_cost_allows_all() -> None:
    assert TpotLine().extra_within(4, 0.1) == 0
    assert fed(0.05, 0.01, counts=[8] * 20).extra_within(4, 0.1) == 0  # all at one count: no slope
    assert fed(0.05, 0.0).extra_within(4, 0.1) > 1000


def test_older_readings_fade() -> None:
    line = fed(0.02, 0.005)
    for _ in range(300):
        for n in (2, 10):
            line.add(n, 0.03 + 0.001 * n)
    alone, slope = line.fit()
    assert alone == pytest.approx(0.03, rel=0.01) and slope == pytest.approx(0.001, rel=0.01)


def test_alone_and_quiet_it_fills_beside_interactive_it_takes_its_share() -> None:
    share = BackgroundShare(slowdown=0.1, quiet_s=2.0, line=fed(0.02, 0.001))
    assert share.slots(0, now=100.0, limit=6, fill=15) == 15  # nothing interactive seen yet
    share.seen_interactive(100.0)
    assert share.slots(0, now=101.0, limit=6, fill=15) == 2  # quiet for 1 s only: 0.1 x 0.021 / 0.001
    assert share.slots(4, now=101.0, limit=6, fill=15) == 2
    assert share.slots(5, now=101.0, limit=6, fill=15) == 1  # the running limit's room is the bound
    assert share.slots(0, now=102.0, limit=6, fill=15) == 15
    assert BackgroundShare(slowdown=0.0, quiet_s=2.0, line=fed(0.02, 0.001)).slots(3, now=0.0, limit=6, fill=15) == 0


def test_a_load_the_engine_serves_on_time_alone_is_not_held_back_and_one_it_cannot_is() -> None:
    demand = Demand(window_s=20.0)
    fit = (0.03, 0.003)  # TPOT 30 ms alone, 3 ms more per sequence: the objective of 0.1 s holds to 23
    assert not demand.served_on_time(fit, 0.1)  # nothing sampled yet
    for t in range(60):  # a minute of Poisson-like bursts around 20 in the system
        demand.sample(float(t), 36 if t % 5 == 0 else 16)
    assert 16 < demand.mean < 23 and demand.served_on_time(fit, 0.1)
    assert not demand.served_on_time(None, 0.1)  # the cost of a sequence unknown: the limit binds
    for t in range(60, 80):  # over capacity: the queue keeps growing
        demand.sample(float(t), 30 + (t - 60) * 2)
    assert not demand.served_on_time(fit, 0.1)
    assert not Demand(window_s=0.0).served_on_time(fit, 0.1)
    sudden = Demand(window_s=20.0)
    sudden.sample(0.0, 0)
    sudden.sample(1.0, 200)  # a queue of 200 after a quiet spell: TPOT 0.63 s if all ran at once
    assert sudden.mean < 23 and not sudden.served_on_time(fit, 0.1)


def test_a_lines_prefill_counts_against_the_slowdown_too() -> None:
    line = fed(0.02, 0.001)
    assert line.extra_within(4, 0.1) == 2  # 0.1 x 0.024 / 0.001, by decode alone
    assert line.extra_within(4, 0.1, share_each=0.05) == 1  # 0.1 / (0.042 + 0.05)
    share = BackgroundShare(slowdown=0.1, quiet_s=2.0, line=line)
    for _ in range(100):
        share.finished(prefill_s=0.25, life_s=5.0)  # a twentieth of its life prefilling
    share.seen_interactive(0.0)
    assert share.slots(4, now=0.5, limit=20, fill=30) == 1


def test_a_burst_runs_at_once_up_to_half_over_the_set_point_and_no_further() -> None:
    fit = (0.03, 0.003)
    assert Demand.burst_cap(fit, 0.1) == 40  # (0.15 - 0.03) / 0.003
    assert Demand.burst_cap(None, 0.1) == 0 and Demand.burst_cap((0.03, 0.0), 0.1) > 1000
    demand = Demand(window_s=20.0)
    for t in range(30):
        demand.sample(float(t), 10)
    demand.sample(30.0, 41)  # past the cap this moment
    assert not demand.served_on_time(fit, 0.1)
