"""How many background sequences give the engine its most tokens per second when nothing else
runs: found by trying, since it is the engine's own and no model predicts it (on a CPU, past some
count the steps slow faster than the batch grows; on a GPU the answer is near the engine's slots).
A hill climb on the measured rate: from all the engine's slots (vLLM's CPU build and its own server
did best at 96-128 of 128; llama.cpp's 16 gave as much as 8 or 24), a step of 30 % while the rate rises
by over 3 %, else the other way, else back to the best, where it stays a few periods before
looking again (the best rate is measured anew each time, so a stale figure does not hold it)."""

from __future__ import annotations

_STEP = 1.3
_GAIN = 1.03  # a rate this much over the best counts as better: under it is noise
_SETTLE = 4  # periods at the best before the next look
_WARM_S = 3.0  # seconds after a change before measuring: lines already running finish at the old level


class FillSearch:
    """Pure: fed the engine's output token count with the clock while background work runs alone."""

    def __init__(self, period_s: float = 20.0) -> None:
        self.period_s = period_s
        self.level = 0  # 0: not started; the caller gives the first level
        self.best_level = 0
        self.best_rate = 0.0
        self._direction = 1
        self._settle = 0
        self._start: tuple[float, int] | None = None
        self._changed_at = 0.0

    def begin(self, level: int, now: float) -> None:
        if not self.level:
            self.level = self.best_level = max(1, level)
            self._changed_at = now

    def interrupted(self) -> None:
        """Interactive work came: the period under way measures something else."""
        self._start = None

    def sample(self, now: float, tokens_out: int, upper: int) -> None:
        if not self.level or now - self._changed_at < _WARM_S:
            return
        if self._start is None:
            self._start = (now, tokens_out)
            return
        began, tokens = self._start
        if now - began < self.period_s:
            return
        self._start = None
        self._next((tokens_out - tokens) / (now - began), upper)
        self._changed_at = now

    def _next(self, rate: float, upper: int) -> None:
        if self.level == self.best_level:
            self.best_rate = rate
            if self._settle > 0:
                self._settle -= 1
                return
            self._move(self._direction, upper)
        elif rate > self.best_rate * _GAIN:
            self.best_level, self.best_rate = self.level, rate
            self._move(self._direction, upper)
        elif self._direction > 0:
            self._direction = -1
            self.level = self.best_level
            self._move(-1, upper)
        else:
            self._direction, self._settle, self.level = 1, _SETTLE, self.best_level

    def _move(self, direction: int, upper: int) -> None:
        step = max(1, round(self.level * (_STEP - 1)))
        level = max(1, min(upper, self.level + direction * step))
        if level == self.level:  # at a bound: the other way
            self._direction = -direction
            level = max(1, min(upper, self.level - direction * step))
        self.level = level
