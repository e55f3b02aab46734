"""Wait estimates from the current drain rate: how fast the queue empties into the engine."""

from __future__ import annotations

import math
from collections import deque

from scheduler.request import PriorityClass

NEVER_RETRY_S = 30  # what a request that would never start is told: the classes above may calm down
MIN_SPAN_S = 5.0
SURGE_S = 10.0  # a class's rate over this span counts where it is above the window's
STEP_S = 3.0  # ...and over this one, where it holds enough arrivals to be more than a cluster
STEP_MIN = 8
_ABOVE = {p: tuple(c for c in PriorityClass if c.rank < p.rank) for p in PriorityClass}  # asked per request


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


class StartRate:
    """Interactive requests started per second over the window, as they were: a waiter's estimate
    takes the lower of this and the rate modelled from the slots and the time in the engine. On
    vLLM's CPU build at 3x and 5x capacity the highs running filled the limit for seconds at a
    time and the lows started only in their gaps: modelled alone, lows waited 2.8-3.2 times what
    they were told (median), with the lower of the two 1.6 times."""

    def __init__(self, window_s: float = 30.0) -> None:
        self.window_s = window_s
        self._starts: deque[float] = deque()
        self._first: float | None = None

    def record(self, now: float) -> None:
        self._first = now if self._first is None else self._first
        self._starts.append(now)
        self._drop(now)

    def per_s(self, now: float) -> float | None:
        """None until anything has started."""
        if self._first is None:
            return None
        self._drop(now)
        return len(self._starts) / _span(self._first, now, self.window_s)

    def _drop(self, now: float) -> None:
        while self._starts and self._starts[0] < now - self.window_s:
            self._starts.popleft()


class ArrivalRates:
    """Recent accepted arrivals per class, so a waiter's estimate counts those that will overtake
    it. Until a window has passed since the first arrival, the rate is over the time seen (at
    least `MIN_SPAN_S`, so a burst at start-up is no rate): a flood of three times what the
    engine drains is recognised within two seconds, not after half a minute."""

    def __init__(self, window_s: float = 30.0) -> None:
        self.window_s = window_s
        self._arrivals: dict[PriorityClass, deque[float]] = {c: deque() for c in PriorityClass}
        # the same arrivals over the shorter spans, so every count is a length (the door asks per request)
        self._surge: dict[PriorityClass, deque[float]] = {c: deque() for c in PriorityClass}
        self._step: dict[PriorityClass, deque[float]] = {c: deque() for c in PriorityClass}
        self._first: float | None = None
        self._last: dict[PriorityClass, float] = {}

    def record(self, priority: PriorityClass, now: float) -> None:
        self._last[priority] = now
        self._arrivals[priority].append(now)
        self._surge[priority].append(now)
        self._step[priority].append(now)
        if self._first is None:
            self._first = now

    def seen_within(self, priority: PriorityClass, now: float, span_s: float) -> bool:
        """Whether a request of `priority` arrived in the last `span_s`."""
        last = self._last.get(priority)
        return last is not None and now - last <= span_s

    def above(self, priority: PriorityClass, now: float) -> float:
        """Arrivals per second of the classes ranked above `priority`, each read as `of` reads it:
        over the window alone, the door read a sixth of the highs' rate 5 s into a step from quiet
        to 5x capacity and promised lows waits that the highs then took."""
        return sum(self.of(cls, now) for cls in _ABOVE[priority])

    def steady_above(self, priority: PriorityClass, now: float) -> float:
        """Arrivals per second of the classes ranked above `priority` over the window alone: what
        passes a request already waiting, on average. The door's reading (`above`) errs toward
        refusing; a waiter told by it at 3x capacity on llama.cpp waited a third of what it was told."""
        return sum(len(self._window(cls, now)) for cls in _ABOVE[priority]) / self._span(now)

    def _window(self, priority: PriorityClass, now: float) -> deque[float]:
        window = self._arrivals[priority]
        while window and window[0] < now - self.window_s:
            window.popleft()
        return window

    def of(self, priority: PriorityClass, now: float) -> float:
        """Arrivals per second of `priority` itself: over the window, or over its last `SURGE_S`
        where that is higher, so a surge counts within seconds (a window that still holds a quiet
        spell would read a jump to 5x as 1x for half a minute) and a lull only once it lasts; over
        its last `STEP_S` where those hold at least `STEP_MIN` arrivals at twice the longer spans'
        rate, so a step is read in full in its first seconds, when `SURGE_S` still holds the quiet
        before it (a fifth of the rate 2 s in), and a Poisson cluster rarely is (8 in 3 s at 1.5x
        capacity, 20 % high: 0.6 %)."""
        window = self._window(priority, now)
        longer = max(_since(self._surge[priority], now - SURGE_S) / SURGE_S, len(window) / self._span(now))
        step = _since(self._step[priority], now - STEP_S)
        return step / STEP_S if step >= STEP_MIN and step / STEP_S > 2 * longer else longer

    def _span(self, now: float) -> float:
        return _span(self._first, now, self.window_s)


def _span(first: float | None, now: float, window_s: float) -> float:
    """The seconds a rate is over: the window, or the time seen since `first` where shorter (at
    least `MIN_SPAN_S`, so a burst at start-up is no rate)."""
    seen = now - first if first is not None else 0.0
    return min(window_s, max(MIN_SPAN_S, seen))


def _since(times: deque[float], start: float) -> int:
    """How many of `times` are after `start`, dropping the older ones."""
    while times and times[0] <= start:
        times.popleft()
    return len(times)
