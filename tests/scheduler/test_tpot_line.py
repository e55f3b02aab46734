import random

import pytest

from scheduler.demand import Demand
from scheduler.tpot_line import TpotLine


def spread_readings(line: TpotLine, alone: float, slope: float, count: int = 60) -> None:
    for i in range(count):
        n = 2 + i % 19
        line.add(n, alone + slope * n)


def test_readings_crowded_at_the_limit_do_not_flatten_the_line():
    """Sustained overload: every reading at about the running limit, TPOT spread by prefills, not
    by the count. A least-squares line over them alone is flat and reads an engine that runs
    hundreds at once within the objective."""
    line, noise = TpotLine(), random.Random(7)
    spread_readings(line, alone=0.03, slope=0.004)
    for _ in range(1000):
        line.add(14 + noise.random() * 4, 0.09 + noise.uniform(-0.03, 0.03))  # alone, a line falling with n
    fit = line.fit()
    assert fit is not None and 0.03 <= fit[0] < 0.06 and 0.002 < fit[1] <= 0.004
    demand = Demand(window_s=20.0)
    demand.sample(0.0, 50)  # a queue of lows at the end of a surge
    assert Demand.burst_cap(fit, 0.085) < 40 and not demand.served_on_time(fit, 0.085)


def test_a_line_the_readings_can_tell_replaces_the_one_held():
    line = TpotLine()
    spread_readings(line, alone=0.03, slope=0.004)
    spread_readings(line, alone=0.05, slope=0.006, count=400)  # the engine got slower: longer prompts
    assert line.fit() == pytest.approx((0.05, 0.006), rel=0.05)


def test_without_a_line_held_the_readings_answer_as_they_are():
    line = TpotLine()
    for n in (1, 3, 1, 3, 1, 3):
        line.add(n, 0.05)  # flat: a GPU's batch costs nothing measurable
    assert line.fit() == pytest.approx((0.05, 0.0), abs=1e-9)
