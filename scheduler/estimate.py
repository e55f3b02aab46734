"""Wait estimates from the current drain rate: how fast the queue empties into the engine."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from scheduler.request import PriorityClass

NEVER_RETRY_S = 30  # what a request that would never start is told: the classes above may calm down
MIN_SPAN_S = 5.0
SURGE_S = 10.0  # a class's rate over this span counts where it is above the window's


class DrainEstimator:
    """Drain rate = requests the engine runs in parallel / their recent mean service time."""

    def __init__(self, window: int = 50) -> None:
        self._service_s: deque[float] = deque(maxlen=window)
        self._total_s = 0.0

    def record(self, service_s: float) -> None:
        if len(self._service_s) == self._service_s.maxlen:
            self._total_s -= self._service_s[0]
        self._service_s.append(max(service_s, 1e-3))
        self._total_s += self._service_s[-1]

    def rate(self, parallel: int) -> float | None:
        if not self._service_s:
            return None
        return max(parallel, 1) * len(self._service_s) / self._total_s

    def wait_s(self, position: int, parallel: int, jumpers_per_s: float = 0.0) -> float | None:
        """Expected wait for the request at 1-based `position` (0: it would run at once), when
        `jumpers_per_s` later arrivals per second will be served before it: infinite when they
        alone take all the engine drains."""
        if position <= 0:
            return 0.0
        rate = self.rate(parallel)
        if rate is None:
            return None
        left = rate - jumpers_per_s
        return position / left if left > 0 else math.inf

    def retry_after_s(self, ahead: int, parallel: int) -> int:
        return retry_after(self.wait_s(ahead + 1, parallel))


def retry_after(wait_s: float | None) -> int:
    if wait_s is None:
        return 1
    return NEVER_RETRY_S if math.isinf(wait_s) else min(3600, max(1, math.ceil(wait_s)))


class ArrivalRates:
    """Recent accepted arrivals per class, so a waiter's estimate counts those that will overtake
    it. Until a window has passed since the first arrival, the rate is over the time seen (at
    least `MIN_SPAN_S`, so a burst at start-up is no rate): a flood of three times what the
    engine drains is recognised within two seconds, not after half a minute."""

    def __init__(self, window_s: float = 30.0) -> None:
        self.window_s = window_s
        self._arrivals: dict[PriorityClass, deque[float]] = {c: deque() for c in PriorityClass}
        self._first: float | None = None

    def record(self, priority: PriorityClass, now: float) -> None:
        self._arrivals[priority].append(now)
        if self._first is None:
            self._first = now

    def above(self, priority: PriorityClass, now: float) -> float:
        """Arrivals per second of the classes ranked above `priority`."""
        return self._rate(now, lambda cls: cls.rank < priority.rank)

    def of(self, priority: PriorityClass, now: float) -> float:
        """Arrivals per second of `priority` itself: over the window, or over its last `SURGE_S`
        where that is higher, so a surge counts within seconds (a window that still holds a quiet
        spell would read a jump to 5x as 1x for half a minute) and a lull only once it lasts."""
        recent = 0
        for t in reversed(self._arrivals[priority]):
            if t <= now - SURGE_S:
                break
            recent += 1
        return max(recent / SURGE_S, self._rate(now, lambda cls: cls is priority))

    def _rate(self, now: float, counted: Callable[[PriorityClass], bool]) -> float:
        count = 0
        for cls, times in self._arrivals.items():
            while times and times[0] < now - self.window_s:
                times.popleft()
            if counted(cls):
                count += len(times)
        seen = now - self._first if self._first is not None else 0.0
        return count / min(self.window_s, max(MIN_SPAN_S, seen))
