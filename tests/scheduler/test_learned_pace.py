"""What the running limit learned of the engine, kept and read back (pure): a limit given it starts
where the one before left off, not at `initial`."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from scheduler.learned_pace import LearnedPace, recall, remember
from scheduler.limit import ConcurrencyLimit
from scheduler.tpot_line import TpotLine
from settings.schema import LimitConfig

OBJECTIVE = 0.1


def learned_on(base_s: float, per_seq_s: float) -> tuple[ConcurrencyLimit, TpotLine]:
    """A limit and a line after a minute of a batch whose TPOT is base + per_seq x running, the
    count moving as load would move it."""
    limit, line = ConcurrencyLimit(LimitConfig(initial=16), OBJECTIVE, upper=64), TpotLine()
    for step in range(60):
        running = max(1, min(limit.value, 2 + step % 9))
        limit.update(base_s + per_seq_s * running, running)
        if limit.counted_s is not None:
            line.add(running, limit.counted_s)
    return limit, line


def test_a_limit_given_what_one_before_learned_starts_at_its_knee_not_at_initial():
    before, before_line = learned_on(0.03, 0.012)  # the knee: (0.09 - 0.03) / 0.012 = 5
    kept = LearnedPace.model_validate_json(remember(before, before_line).model_dump_json())

    fresh, fresh_line = ConcurrencyLimit(LimitConfig(initial=16), OBJECTIVE, upper=64), TpotLine()
    assert fresh.value == 16 and fresh_line.fit() is None
    recall(kept, fresh, fresh_line)

    assert before.value <= 6
    assert fresh.value == before.value
    assert fresh_line.fit() == pytest.approx((0.03, 0.012))
    assert fresh.alone_s == before.alone_s and fresh.target_s == pytest.approx(before.target_s)
    fresh.update(0.03 + 0.012 * fresh.value, fresh.value)  # its first reading counts at once
    assert fresh.counted_s is not None


def test_under_another_objective_the_line_is_kept_and_the_limit_learned_afresh():
    before, before_line = learned_on(0.03, 0.012)
    fresh, fresh_line = ConcurrencyLimit(LimitConfig(initial=16), 0.2, upper=64), TpotLine()
    recall(remember(before, before_line), fresh, fresh_line)
    assert fresh.value == 16 and fresh.set_point_s == pytest.approx(0.2 * 0.9)
    assert fresh_line.fit() == pytest.approx((0.03, 0.012))


def test_under_another_headroom_the_limit_and_set_point_are_learned_afresh():
    before, before_line = learned_on(0.03, 0.012)
    fresh = ConcurrencyLimit(LimitConfig(initial=16, headroom=0.3), OBJECTIVE, upper=64)
    recall(remember(before, before_line), fresh, TpotLine())
    assert fresh.value == 16 and fresh.set_point_s == pytest.approx(0.07)


def test_readings_after_the_restart_replace_the_ones_kept():
    before, before_line = learned_on(0.03, 0.012)
    line = TpotLine()
    recall(remember(before, before_line), ConcurrencyLimit(LimitConfig(), OBJECTIVE, upper=64), line)
    for i in range(200):  # the engine got faster since: another machine's neighbours
        n = 2 + i % 9
        line.add(n, 0.02 + 0.006 * n)
    assert line.fit() == pytest.approx((0.02, 0.006), rel=0.05)


def test_a_limit_that_does_not_adapt_keeps_the_engines_slots():
    before, before_line = learned_on(0.03, 0.012)
    fixed = ConcurrencyLimit(LimitConfig(adaptive=False), OBJECTIVE, upper=48)
    recall(remember(before, before_line), fixed, TpotLine())
    assert fixed.value == 48


@pytest.mark.parametrize(
    "change",
    [
        {"limit": 0.5},
        {"tpot_s": -0.1},
        {"objective_s": 0},
        {"alone": [0.03] * 65},
        {"line_sums": [1, 2, 3]},
        {"line_sums": [-1, 2, 3, 4, 5, 6]},
        {"set_point_s": 0.2},
        {"unknown": 1},
    ],
)
def test_a_kept_pace_out_of_bounds_is_refused_whole(change):
    kept = json.loads(remember(*learned_on(0.03, 0.012)).model_dump_json())
    with pytest.raises(ValidationError):
        LearnedPace.model_validate_json(json.dumps({**kept, **change}))


@pytest.mark.parametrize("field", ["tpot_s", "set_point_s", "limit"])
def test_a_kept_pace_with_nan_or_infinity_is_refused(field):
    kept = json.loads(remember(*learned_on(0.03, 0.012)).model_dump_json())
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValidationError):
            LearnedPace.model_validate_json(json.dumps({**kept, field: bad}))
