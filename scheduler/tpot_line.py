"""TPOT against the number of sequences running, as a line `a + b * n` fitted to the running
limit's readings, older ones fading. Background work reads it to ask what one more sequence costs
the interactive ones beside it: on a GPU almost nothing (b is tiny next to a), on a CPU much more.
Least squares over all recent readings, not the limit's two-point estimates, since the question is
asked at counts the limit has not read lately.

A line the readings cannot tell from flat does not replace one they could. Under sustained
overload every reading is at about the running limit, where prefills spread TPOT wider than the
counts do: on vLLM's CPU build at 5x capacity the fit drifted from 0.03 + 0.004 n to
0.09 + 0.0001 n within a minute and read that the engine runs 433 sequences within 1.5 times the
set point (scheduler/demand.py); in another run, as the surge ended, 49 queued lows started
against a running limit of 10 and 39 of them were then suspended.

Fed only the readings the running limit took for no stall (scheduler/limit.py): least squares
weighs a reading by its square, and one stall (2.57 s with 4 running, as llama.cpp's first interval
read) fitted -1.0 + 0.6 n, which held every burst to one sequence for a minute."""

from __future__ import annotations

_MEMORY = 0.98  # each new reading keeps this much of the weight of those before: about 50 readings
_MIN_WEIGHT = 4.0  # fewer readings than this say nothing
_MIN_SPREAD = 0.25  # nor do readings all at one count (variance of n)
_SIGNIFICANT = 2.0  # a slope this many standard errors above zero replaces the line held


class TpotLine:
    """Pure: fed (running, TPOT) readings, it answers how many more sequences fit a slowdown."""

    def __init__(self) -> None:
        self._w = self._n = self._t = self._nn = self._nt = self._tt = 0.0
        self._held: tuple[float, float] | None = None  # the last line whose slope the readings could tell

    def add(self, running: float, tpot_s: float) -> None:
        self._w, self._n, self._t, self._nn, self._nt, self._tt = (
            _MEMORY * self._w + 1,
            _MEMORY * self._n + running,
            _MEMORY * self._t + tpot_s,
            _MEMORY * self._nn + running * running,
            _MEMORY * self._nt + running * tpot_s,
            _MEMORY * self._tt + tpot_s * tpot_s,
        )
        fitted = self._least_squares()
        if fitted is not None and fitted[2]:
            self._held = fitted[:2]

    def learned(self) -> tuple[float, float, float, float, float, float]:
        """The readings' weighted sums: what a restart keeps (scheduler/learned_pace.py)."""
        return self._w, self._n, self._t, self._nn, self._nt, self._tt

    def relearn(self, sums: tuple[float, float, float, float, float, float]) -> None:
        """The readings of a run before, fading as new ones come; the line they fit is held again
        only once a new reading confirms it."""
        self._w, self._n, self._t, self._nn, self._nt, self._tt = sums
        self._held = None

    def fit(self) -> tuple[float, float] | None:
        """(a, b): TPOT alone and the cost of each sequence more; None while the readings cannot say."""
        if self._held is not None:
            return self._held
        fitted = self._least_squares()
        return None if fitted is None else fitted[:2]

    def _least_squares(self) -> tuple[float, float, bool] | None:
        """(a, b, whether b is significantly above zero) over the readings, weighted by age."""
        if self._w < _MIN_WEIGHT:
            return None
        mean_n, mean_t = self._n / self._w, self._t / self._w
        spread = self._nn / self._w - mean_n * mean_n
        if spread < _MIN_SPREAD:
            return None
        slope = (self._nt / self._w - mean_n * mean_t) / spread
        residual = max(0.0, self._tt / self._w - mean_t * mean_t - slope * slope * spread)
        error = (residual / (self._w * spread)) ** 0.5
        return mean_t - slope * mean_n, slope, slope > _SIGNIFICANT * error

    def extra_within(self, running: int, slowdown: float, share_each: float = 0.0) -> int:
        """Sequences that may join `running` ones while their TPOT grows by at most `slowdown` (0.1:
        10 %), each also taking `share_each` of the engine's time besides its decode (its prefill,
        which stalls every step on a CPU); 0 while the cost is unknown, and as many as asked for
        where it is not measurable."""
        fit = self.fit()
        if fit is None:
            return 0
        alone, slope = fit
        each = max(0.0, slope) / max(alone + slope * max(running, 1), slope, 1e-9) + share_each
        return int(slowdown / each + 1e-9) if each > 0 else 1 << 30
