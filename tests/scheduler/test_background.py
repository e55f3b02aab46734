"""Background work's share of the engine: the fitted TPOT line and the slots it allows."""

from __future__ import annotations

import pytest

from scheduler.background import BackgroundShare
from scheduler.tpot_line import TpotLine


def fed(alone: float, slope: float, counts=range(1, 17)) -> TpotLine:
    line = TpotLine()
    for n in counts:
        line.add(n, alone + slope * n)
    return line


def test_the_line_recovers_tpot_alone_and_the_cost_of_each_sequence() -> None:
    alone, slope = fed(0.02, 0.005).fit()
    assert alone == pytest.approx(0.02) and slope == pytest.approx(0.005)


@pytest.mark.parametrize("alone, slope, running, extra", [
    (0.02, 0.005, 4, 0),  # a CPU: each sequence costs a quarter of TPOT alone; 10 % buys none
    (0.02, 0.001, 4, 2),  # 0.1 x 0.024 / 0.001
    (0.03, 0.0005, 20, 8),  # a GPU: decode is memory-bound, a sequence costs almost nothing
])
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
    share = BackgroundShare(slowdown=0.1, quiet_s=2.0)
    share.line = fed(0.02, 0.001)
    assert share.slots(0, now=100.0, limit=6, fill=15) == 15  # nothing interactive seen yet
    share.seen_interactive(100.0)
    assert share.slots(0, now=101.0, limit=6, fill=15) == 2  # quiet for 1 s only: 0.1 x 0.021 / 0.001
    assert share.slots(4, now=101.0, limit=6, fill=15) == 2
    assert share.slots(5, now=101.0, limit=6, fill=15) == 1  # the running limit's room is the bound
    assert share.slots(0, now=102.0, limit=6, fill=15) == 15
    assert BackgroundShare(slowdown=0.0, quiet_s=2.0).slots(3, now=0.0, limit=6, fill=15) == 0
