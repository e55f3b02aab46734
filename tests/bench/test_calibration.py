"""C_slo from a calibration: the load every level of bench/load.py is a multiple of."""

from __future__ import annotations

import pytest

from bench.calibration import Level, c_slo


def level(c: int, tpot_s: float, e2e_s: float) -> Level:
    return Level(c, c / e2e_s, 0.0, tpot_s, 0.5, e2e_s, 20)


def linear(cs: tuple[int, ...] = (8, 16, 24, 32, 48)) -> list[Level]:
    """TPOT 0.05 + 0.0025 c (the objective 0.1 s at c = 20), E2E 2 + 0.2 c (6 s there)."""
    return [level(c, 0.05 + 0.0025 * c, 2 + 0.2 * c) for c in cs]


def test_the_req_s_where_tpot_reaches_the_objective() -> None:
    assert c_slo(linear(), 0.1) == pytest.approx(20 / 6)


def test_one_level_caught_in_a_slow_spell_does_not_decide() -> None:
    levels = linear()
    levels[0] = level(8, 0.104, 7.4)  # the first level twice as slow as its neighbours say
    assert c_slo(levels, 0.1) == pytest.approx(20 / 6, rel=0.05)


def test_never_reached_gives_the_highest_concurrency_and_always_exceeded_the_lowest() -> None:
    assert c_slo(linear(), 0.5) == pytest.approx(48 / 11.6)
    assert c_slo(linear(), 0.06) == pytest.approx(8 / 3.6)


def test_levels_far_past_the_objective_are_left_out() -> None:
    levels = [*linear((8, 16, 24, 32)), level(64, 0.9, 40.0)]
    assert c_slo(levels, 0.1) == pytest.approx(20 / 6)
