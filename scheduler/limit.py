"""The adaptive running limit: how many sequences the engine may hold at once.

Every running sequence shares each decode step, so time per output token (TPOT) rises with the
batch, close to `a + b * n` for n running. A fixed limit is right for one machine and one load
only; this one looks for the knee, the largest batch whose TPOT stays under the objective, in the
spirit of TCP Vegas and Netflix's gradient limit. From one reading at n running, the estimate
`n * target / tpot` lies between n and the knee (the line through the origin and the reading is
steeper than the real one, so it reaches the target short of the knee from below and past it from
above), so stepping towards it converges on the knee from either side without overshoot, quickly
where the batch costs little (GPUs).

The set point sits under the objective, since the mean TPOT the limit steers hides a spread
between requests (prefills landing in one request's life and not another's) and a gap between what
the engine loop measures and what the client sees, both different on every machine. So it is
trimmed by the outcome that counts: the TPOT each finished request actually had.
"""

from __future__ import annotations

from collections import deque

from settings.schema import LimitConfig

_STEP_UP = 0.5  # how far towards the knee one interval moves when there is room...
_STEP_DOWN = 0.3  # ...and when over it: gently, since a shrinking limit stops admissions
_DEADBAND = 0.05  # TPOT within 5 % of the set point: hold
_MAX_GROWTH = 2.0  # never past twice the batch measured: a knee read off light load is a guess
_SMOOTHING = 0.3  # weight of the newest reading: TPOT as a request lives it, over seconds
_FLOOR = 2.0  # an engine slower than the objective even alone may still double its TPOT alone
_ALONE = 2  # readings with at most this many running show the engine's TPOT alone
_BUSY = 0.5  # grow only while the batch fills a good part of the limit: light load says little
_RECENT = 32  # finished requests the set point is trimmed by (seconds of them under load)
_TRIM_STEP = 0.01  # at most 1 % per interval: requests report a set point seconds after it held
_TRIM_GAIN = 0.5
_SET_POINT_RANGE = (0.5, 1.0)  # as a share of the objective


class ConcurrencyLimit:
    """Pure and synchronous: fed one TPOT reading per interval, it returns the new limit."""

    def __init__(self, config: LimitConfig, tpot_objective_s: float, upper: int) -> None:
        self.config = config
        self.objective_s = tpot_objective_s
        self.upper = max(1, upper)
        self._limit = float(min(config.initial, self.upper)) if config.adaptive else float(self.upper)
        self.tpot_s: float | None = None
        self.alone_s: float | None = None
        self.set_point_s = tpot_objective_s * (1 - config.headroom)
        self._finished: deque[float] = deque(maxlen=_RECENT)

    @property
    def target_s(self) -> float:
        """The set point, or, where the engine misses the objective even alone (shrinking the batch
        would only queue work), twice its TPOT alone."""
        return self.set_point_s if self.alone_s is None else max(self.set_point_s, _FLOOR * self.alone_s)

    @property
    def value(self) -> int:
        return max(1, min(self.upper, int(self._limit)))

    def set_upper(self, upper: int) -> None:
        self.upper = max(1, upper)
        self._limit = min(self._limit, self.upper) if self.config.adaptive else float(self.upper)

    def finished(self, tpot_s: float) -> None:
        """One finished request's own TPOT: its decode time over its tokens after the first."""
        self._finished.append(tpot_s)

    def update(self, tpot_s: float | None, running: float) -> int:
        """One control step from the TPOT measured over the last interval with `running` sequences
        (mean over the interval); no reading (nothing decoded) leaves the limit where it is."""
        if tpot_s is None or running <= 0:
            return self.value
        self.tpot_s = tpot_s if self.tpot_s is None else self.tpot_s + _SMOOTHING * (tpot_s - self.tpot_s)
        if running <= _ALONE:  # the reading itself: the smoothed figure still carries the larger batch before
            self.alone_s = tpot_s if self.alone_s is None else min(self.alone_s, tpot_s)
        busy = running >= _BUSY * self._limit
        if busy:
            self._trim()
        if not self.config.adaptive or abs(self.target_s / max(self.tpot_s, 1e-6) - 1) <= _DEADBAND:
            return self.value
        knee = self.knee(running)
        if self.tpot_s > self.target_s:
            self._limit += _STEP_DOWN * (min(knee, self._limit) - self._limit)
        elif busy:
            knee = min(knee, running * _MAX_GROWTH + 1)
            self._limit += _STEP_UP * (max(knee, self._limit) - self._limit)
        self._limit = max(1.0, min(float(self.upper), self._limit))
        return self.value

    def knee(self, running: float) -> float:
        """Where the line through this reading and the origin reaches the set point: short of the
        knee from below, past it from above, so each step lands between here and the knee."""
        return running * self.target_s / self.tpot_s

    def _trim(self) -> None:
        """Moves the set point until `on_time_share` of recent requests' own TPOT meets the objective."""
        share = self.config.on_time_share
        if not share or len(self._finished) < _RECENT // 2:
            return
        ranked = sorted(self._finished)
        quantile = ranked[min(len(ranked) - 1, int(share * len(ranked)))]
        step = max(-_TRIM_STEP, min(_TRIM_STEP, _TRIM_GAIN * (self.objective_s / max(quantile, 1e-6) - 1)))
        low, high = (bound * self.objective_s for bound in _SET_POINT_RANGE)
        self.set_point_s = max(low, min(high, self.set_point_s * (1 + step)))
