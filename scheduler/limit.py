"""The adaptive running limit: how many sequences the engine may hold at once.

Every running sequence shares each decode step, so time per output token (TPOT) rises with the
batch. A fixed limit is right for one machine and one load only; this one looks for the largest
batch whose TPOT stays under the objective, in the spirit of TCP Vegas and Netflix's gradient
limit. With TPOT roughly `a + b * n` for n running, the estimate `n * target / tpot` lies between
n and the knee, so stepping towards it converges on the knee from either side, quickly when the
batch costs little (GPUs) and without overshoot when it costs a lot (CPUs).
"""

from __future__ import annotations

from settings.schema import LimitConfig

_STEP = 0.5  # how far towards the estimate one interval moves
_DEADBAND = 0.05  # TPOT within 5 % of the set point: hold
_MAX_GROWTH = 2.0  # at most doubling per interval
_SMOOTHING = 0.5  # weight of the newest reading: one noisy interval must not halve the batch
_FLOOR = 2.0  # an engine slower than the objective even alone may still double its TPOT alone
_ALONE = 2  # readings with at most this many running show the engine's TPOT alone
_BUSY = 0.8  # grow only while the limit is what holds the batch back


class ConcurrencyLimit:
    """Pure and synchronous: fed one TPOT reading per interval, it returns the new limit."""

    def __init__(self, config: LimitConfig, tpot_objective_s: float, upper: int) -> None:
        self.config = config
        self.objective_s = tpot_objective_s
        self.upper = max(1, upper)
        self._limit = float(min(config.initial, self.upper)) if config.adaptive else float(self.upper)
        self.tpot_s: float | None = None
        self._best_s: float | None = None

    @property
    def target_s(self) -> float:
        """The set point: under the objective by the headroom, so most requests' own TPOT meets it.
        Where the engine misses the objective even alone, shrinking the batch would only queue
        work: then the set point is twice its TPOT alone."""
        target = self.objective_s * (1 - self.config.headroom)
        return target if self._best_s is None else max(target, _FLOOR * self._best_s)

    @property
    def value(self) -> int:
        return max(1, min(self.upper, int(self._limit)))

    def set_upper(self, upper: int) -> None:
        self.upper = max(1, upper)
        self._limit = min(self._limit, self.upper) if self.config.adaptive else float(self.upper)

    def update(self, tpot_s: float | None, running: float) -> int:
        """One control step from the TPOT measured over the last interval with `running` sequences
        (mean over the interval), smoothed over intervals; no reading (nothing decoded) leaves the
        limit where it is."""
        if tpot_s is None or running <= 0:
            return self.value
        self.tpot_s = tpot_s if self.tpot_s is None else self.tpot_s + _SMOOTHING * (tpot_s - self.tpot_s)
        if running <= _ALONE:
            self._best_s = self.tpot_s if self._best_s is None else min(self._best_s, self.tpot_s)
        if not self.config.adaptive:
            return self.value
        ratio = self.target_s / max(self.tpot_s, 1e-6)
        if abs(ratio - 1) <= _DEADBAND:
            return self.value
        estimate = running * ratio
        if ratio < 1:
            self._limit += _STEP * (min(estimate, self._limit) - self._limit)
        elif running >= _BUSY * self._limit - 1:
            estimate = min(estimate, self._limit * _MAX_GROWTH + 1)
            self._limit += _STEP * (max(estimate, self._limit) - self._limit)
        self._limit = max(1.0, min(float(self.upper), self._limit))
        return self.value
