"""The interactive load as the engine alone would see it: requests running or waiting, averaged
over `window_s`. The running limit exists for loads the engine cannot serve on time; at a load it
can, the engine alone would have run every request at once and met the objective on average, so
holding some back only makes them wait (at 0.7x capacity on vLLM's CPU build, low requests waited
1.7-2.7 s at p99 in Poisson bursts against 0.3-0.4 s on vLLM alone). The average, not the moment:
a burst over the limit is what a load under capacity looks like, and a load over it shows as a
mean that keeps growing with the queue. A burst the engine would run at over 1.5 times the set
point (a queue of hundreds after a quiet spell) is not one it serves on time, whatever the mean."""

from __future__ import annotations

import math

_BURST = 1.5  # the most TPOT, as a multiple of the set point, a burst may be admitted up to


class Demand:
    """Pure: sampled with the clock, it says whether the present load is one the engine serves on
    time alone, by the fitted TPOT line (scheduler/tpot_line.py)."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.mean = 0.0
        self.now = 0
        self._at: float | None = None

    def sample(self, now: float, in_system: int) -> None:
        if self._at is None:
            self.mean = float(in_system)
        elif self.window_s > 0:
            weight = 1 - math.exp(-max(0.0, now - self._at) / self.window_s)
            self.mean += weight * (in_system - self.mean)
        self._at, self.now = now, in_system

    def served_on_time(self, fit: tuple[float, float] | None, objective_s: float) -> bool:
        """Whether the engine alone, holding the mean load at once, would keep TPOT within
        `objective_s`: the running limit's set point, since the line is read off the steps without
        a prefill and the set point is trimmed by what prefills add to requests' own TPOT (on
        vLLM's CPU build at 1.5x capacity the line predicted 0.09 s where requests saw 0.14)."""
        if fit is None or self.window_s <= 0 or self._at is None:
            return False
        alone, slope = fit
        return alone + slope * self.mean <= objective_s and self.now <= self.burst_cap(fit, objective_s)

    @staticmethod
    def burst_cap(fit: tuple[float, float] | None, objective_s: float) -> int:
        """The most requests a burst may run at once: where the line reaches 1.5 x `objective_s`.
        Checked at each start, so a load that turns past capacity floods the engine for one control
        interval at most. On vLLM's CPU build, turning from idle to 3x capacity: at 2x, lows holding
        their slots for their whole answers held a few highs' first tokens 4.8 s (p99); at 1.25x,
        bursts at 0.7x waited (low TTFT p99 1.06 s against vLLM's 0.28); 1.5x kept both (0.40 s
        at 3x, 0.36 s against 0.26 s at 0.7x)."""
        return reaching(fit, _BURST * objective_s) or 0


def reaching(fit: tuple[float, float] | None, tpot_s: float) -> int | None:
    """How many sequences the fitted line runs at `tpot_s` (None while there is no line)."""
    if fit is None:
        return None
    alone, slope = fit
    return 1 << 30 if slope <= 0 else max(0, int((tpot_s - alone) / slope))
