"""The adaptive running limit: how many sequences the engine may hold at once.

Every running sequence shares each decode step, so time per output token (TPOT) rises with the
batch, close to `a + b * n` for n running. A fixed limit is right for one machine and one load
only; this one looks for the knee, the largest batch whose TPOT stays under the objective, in the
spirit of TCP Vegas and Netflix's gradient limit. Over the target, the line through the origin
and one reading at n running is steeper than the real curve, so `n * target / tpot` lies between
n and the knee: shrinking towards it cannot overshoot. Under the target, the limit grows along the
line through the engine's TPOT alone and the reading, where that is known: on CPUs most of a step
is fixed cost, and the line through the origin took half a minute to win back a limit cut by a
passing slow spell.

The set point sits under the objective, since the mean TPOT the limit steers hides a spread
between requests (prefills landing in one request's life and not another's), different on every
machine. So it is trimmed by that spread: each finished request's own TPOT over the batch's mean
TPOT during its life. A ratio, not the request's TPOT itself: that lags a request's lifetime behind
the batch and, after a slow spell, kept pushing the set point down once the spell had passed.

Work-conserving: one stalled interval (a pause of this process or of the machine) is not the
engine's pace, so a reading three times the smoothed TPOT counts only when another of the last
four intervals stalled too. Read as they came, single stalls cut the limit to one or two at light
load while the engine sat idle, and requests queued that the engine alone served at once. Not only
the interval before: at a step to 5x capacity on vLLM's CPU build prefill-heavy intervals read
0.18-0.25 s between clean ones at 0.07, each was dropped as lone, and the limit grew from 10 to 30
while every high decoded at 0.12-0.15 s. A confirmed one counts as three times, no more: a burst
of prompts prefilled at a step to 5x capacity (vLLM's CPU build) read 1.5 s for two intervals, 24
times the TPOT before and after it, and the limit, halved, held highs in the queue for 10 s while
the engine decoded at 0.07-0.08 s.

An interval read over the target grows nothing, whatever the smoothed figure says: a fresh server
stepped to 5x capacity on llama.cpp read 0.03-0.05 s with 4-10 running, then 0.13 s with 22 (a
stall, then a confirmed one), the smoothed figure stayed at 0.046 s, and the limit grew from 18
to 31, every high then decoding at 0.2-0.3 s.

What clients saw bounds it too: the readings leave out the gaps a prefill stretched, and on
llama.cpp (about 0.2 s a prompt on 2 cores) at 1x they read 0.05-0.07 s with 9-12 running while
every gap read 0.09-0.16 s; the limit kept 16 or grew, and a step to 1.5x started that many, none
of the step's first requests then decoding on time. So while every gap reads over the objective
and the batch fills a good part of the limit, it shrinks towards running x objective / that TPOT,
and it grows only while every gap reads within the objective (the target instead, where the floor
below lifts it past the objective). Not at light load: a few prompts beside a few sequences are
not the batch's doing.

It grows no further than where the TPOT line fitted to the last minute's readings reaches the
target (scheduler/tpot_line.py), where one is known: a single reading, its prefills' gaps left out, read
0.065 s with 7 running at a step to 5x capacity on llama.cpp where the line read 0.079 s, and grew
the limit from 4 to 10 in one interval; lows filled it, and the highs then decoded past the
objective beside them.

A fresh limit's first reading waits for a second, and starts from the lower of the two: llama.cpp's
first interval after start read 2.57 s with 4 running (its first steps warm it up), then 0.02-0.09,
and taken at once it cut the limit from 16 to 1 within six seconds at light load. The readings
that were no stall (`counted_s`) are what the TPOT line is fitted to (scheduler/tpot_line.py).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from settings.schema import LimitConfig

_STEP_UP = 0.5  # how far towards the knee one interval moves when there is room...
_STEP_DOWN = 0.3  # ...and when over it: gently, since a shrinking limit stops admissions
_DEADBAND = 0.05  # TPOT within 5 % of the set point: hold
_MAX_GROWTH = 2.0  # never past twice the batch measured: a knee read off light load is a guess
_SMOOTHING = 0.3  # weight of the newest reading: TPOT as a request lives it, over seconds
_FLOOR = 1.5  # an engine (nearly) too slow for the objective alone may still run 50 % slower than alone
_STARVED = 8  # ...in full once the limit is down to this, not at all from twice it, in between in
# part: TPOT read with a few running while others arrive carries their prefills, so it overstates
# the engine alone and must not lift a limit that has room; a ramp, since a switch made it dither
_ALONE = 4  # readings with at most this many running stand for the engine's TPOT alone: a limit
# cut this far on a machine slower than the objective is how the floor learns of it
_ALONE_KEPT = 5  # the least of the last few such readings: one lucky reading must not stay forever
_BUSY = 0.5  # grow only while the batch fills a good part of the limit: light load says little
RECENT = 64  # finished requests the set point is trimmed by
_STALL = 3.0  # a reading this many times the smoothed TPOT counts only when another confirms it...
_STALL_SEEN = 4  # ...among the readings this many intervals before it
_TRIM_STEP = 0.02  # at most 2 % per interval
_SET_POINT_RANGE = (0.5, 1.0)  # as a share of the objective


class ConcurrencyLimit:
    """Pure and synchronous: fed one TPOT reading per interval, it returns the new limit."""

    def __init__(self, config: LimitConfig, tpot_objective_s: float, upper: int) -> None:
        self.config = config
        self.objective_s = tpot_objective_s
        self.upper = max(1, upper)
        self._limit = float(min(config.initial, self.upper)) if config.adaptive else float(self.upper)
        self.tpot_s: float | None = None
        self.counted_s: float | None = None  # the last interval's reading, None if it was a stall
        self._first_s: float | None = None
        self._alone: deque[float] = deque(maxlen=_ALONE_KEPT)
        self.set_point_s = tpot_objective_s * (1 - config.headroom)
        self._spread: deque[float] = deque(maxlen=RECENT)
        self._stalls: deque[bool] = deque(maxlen=_STALL_SEEN)  # which of the last readings were stalls

    @property
    def alone_s(self) -> float | None:
        return min(self._alone) if self._alone else None

    @property
    def target_s(self) -> float:
        """The set point, or, where the engine misses the objective even alone and the limit is down
        to a handful (shrinking the batch further would only queue work), up to 1.5 times its TPOT
        alone."""
        if self.alone_s is None:
            return self.set_point_s
        weight = min(1.0, max(0.0, 2 - self._limit / _STARVED))
        return self.set_point_s + weight * max(0.0, _FLOOR * self.alone_s - self.set_point_s)

    @property
    def value(self) -> int:
        return max(1, min(self.upper, int(self._limit)))

    def set_upper(self, upper: int) -> None:
        self.upper = max(1, upper)
        self._limit = min(self._limit, self.upper) if self.config.adaptive else float(self.upper)

    def learned(self) -> dict[str, Any]:
        """What the readings taught of the engine, to keep across a restart (scheduler/pace_file.py)."""
        return {
            "objective_s": self.objective_s,
            "headroom": self.config.headroom,
            "on_time_share": self.config.on_time_share,
            "limit": self._limit,
            "tpot_s": self.tpot_s,
            "alone": list(self._alone),
            "set_point_s": self.set_point_s,
            "spread": list(self._spread),
        }

    def relearn(
        self,
        limit: float | None,
        tpot_s: float | None,
        alone: list[float],
        set_point_s: float | None,
        spread: list[float],
    ) -> None:
        """Back to what a run before learned (scheduler/learned_pace.py); its first reading then
        counts as it comes."""
        self._alone = deque(alone, maxlen=_ALONE_KEPT)
        self._spread = deque(spread, maxlen=RECENT)
        self.tpot_s = tpot_s
        if limit is not None and self.config.adaptive:
            self._limit = max(1.0, min(float(self.upper), limit))
        if set_point_s is not None:
            self.set_point_s = set_point_s

    def finished(self, tpot_s: float, batch_tpot_s: float) -> None:
        """One finished request's own TPOT (decode time over its tokens after the first) and the
        batch's mean TPOT over the same time."""
        if batch_tpot_s > 0:
            self._spread.append(tpot_s / batch_tpot_s)

    def update(
        self, tpot_s: float | None, running: float, seen_s: float | None = None, line_knee: float | None = None
    ) -> int:
        """One control step from the TPOT measured over the last interval with `running` sequences
        (mean over the interval); no reading (nothing decoded) leaves the limit where it is.
        `seen_s`: the same interval's TPOT with prefills' gaps in, what clients saw. `line_knee`:
        where the fitted TPOT line reaches the target (None: no line yet), past which it never grows."""
        self.counted_s = None
        self._step(tpot_s, running, seen_s, line_knee)
        return self.value

    def _step(self, tpot_s: float | None, running: float, seen_s: float | None, line_knee: float | None) -> None:
        if tpot_s is None or running <= 0:
            self._stalls.append(False)  # an idle interval ages the memory too
            return
        if self.tpot_s is None:
            if self._first_s is None:
                self._first_s = tpot_s  # one reading is no pace: a fresh engine's first steps warm it up
                return
            self.tpot_s = min(self._first_s, tpot_s)
        read_s = tpot_s
        stalled = self.tpot_s is not None and tpot_s > _STALL * self.tpot_s
        recent = any(self._stalls)
        self._stalls.append(stalled)
        if stalled and self.tpot_s is not None:
            if not recent:
                return  # a lone stall, so far
            tpot_s = _STALL * self.tpot_s  # confirmed: a step, counted at most at the threshold
        else:
            self.counted_s = tpot_s
        tpot = self.tpot_s = tpot_s if self.tpot_s is None else self.tpot_s + _SMOOTHING * (tpot_s - self.tpot_s)
        if running <= _ALONE:  # the reading itself: the smoothed figure still carries the larger batch before
            self._alone.append(tpot_s)
        busy = running >= _BUSY * self._limit
        if busy:
            self._trim()
        seen_bound = max(self.objective_s, self.target_s)  # an engine too slow alone keeps its floor
        seen_over = busy and seen_s is not None and seen_s > seen_bound * (1 + _DEADBAND)
        if not self.config.adaptive or (abs(self.target_s / max(tpot, 1e-6) - 1) <= _DEADBAND and not seen_over):
            return
        if tpot > self.target_s or seen_over:
            knee = self.knee(running, tpot)
            if seen_over and seen_s is not None:
                knee = min(knee, running * seen_bound / seen_s)
            self._limit += _STEP_DOWN * (min(knee, self._limit) - self._limit)
        elif busy and read_s <= self.target_s and (seen_s is None or seen_s <= seen_bound):
            knee = min(
                self.knee_from_alone(running, tpot),
                running * _MAX_GROWTH + 1,
                float("inf") if line_knee is None else line_knee,
            )
            self._limit += _STEP_UP * (max(knee, self._limit) - self._limit)
        self._limit = max(1.0, min(float(self.upper), self._limit))

    def knee(self, running: float, tpot_s: float) -> float:
        """Where the line through this reading and the origin reaches the set point: short of the
        knee from below, past it from above, so each step lands between here and the knee."""
        return running * self.target_s / tpot_s

    def knee_from_alone(self, running: float, tpot_s: float) -> float:
        """Where the line through TPOT alone and this reading reaches the set point: the fixed cost
        of a step kept out of the per-sequence slope. Below the set point only; a batch that costs
        nothing measurable over one sequence has its knee out of sight (the caller caps growth)."""
        alone = self.alone_s
        if alone is None:
            return self.knee(running, tpot_s)
        if tpot_s <= alone:
            return float("inf")
        return running * (self.target_s - alone) / (tpot_s - alone)

    def _trim(self) -> None:
        """Moves the set point until `on_time_share` of recent requests would meet the objective
        with the batch anywhere in the band the limit holds it in."""
        share = self.config.on_time_share
        if not share or len(self._spread) < RECENT // 2:
            return
        ranked = sorted(self._spread)
        quantile = ranked[min(len(ranked) - 1, int(share * len(ranked)))]
        low, high = (bound * self.objective_s for bound in _SET_POINT_RANGE)
        wanted = max(low, min(high, self.objective_s / max(quantile, 1e-6) / (1 + _DEADBAND)))
        step = max(-_TRIM_STEP, min(_TRIM_STEP, wanted / self.set_point_s - 1))
        self.set_point_s *= 1 + step
