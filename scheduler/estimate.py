"""Wait estimates from the current drain rate: how fast the queue empties into the engine."""

from __future__ import annotations

import math
from collections import deque


class DrainEstimator:
    """Drain rate = requests the engine runs in parallel / their recent mean service time."""

    def __init__(self, window: int = 50) -> None:
        self._service_s: deque[float] = deque(maxlen=window)

    def record(self, service_s: float) -> None:
        self._service_s.append(max(service_s, 1e-3))

    def rate(self, parallel: int) -> float | None:
        if not self._service_s:
            return None
        mean = sum(self._service_s) / len(self._service_s)
        return max(parallel, 1) / mean

    def wait_s(self, position: int, parallel: int) -> float | None:
        """Expected wait for the request at 1-based `position` (0: it would run at once)."""
        if position <= 0:
            return 0.0
        rate = self.rate(parallel)
        return None if rate is None else position / rate

    def retry_after_s(self, ahead: int, parallel: int) -> int:
        wait = self.wait_s(ahead + 1, parallel)
        return 1 if wait is None else min(3600, max(1, math.ceil(wait)))
