"""Emergency mode: under pressure, favour high requests and shorten how long low ones may wait."""

from __future__ import annotations

from scheduler.request import PriorityClass, Request
from settings.schema import PressureConfig


class PressureMonitor:
    def __init__(self, config: PressureConfig) -> None:
        self.config = config
        self.emergency = False
        self.switches = 0

    def sample(self, avg_wait_s: float, high_waiting: int) -> bool:
        """Record one sample; True when the mode switched."""
        pressed = avg_wait_s > self.config.avg_wait_s or high_waiting >= self.config.high_waiting
        if pressed == self.emergency:
            return False
        self.emergency = pressed
        self.switches += 1
        return True

    def weight(self, priority: PriorityClass, score: float) -> float:
        if self.emergency and priority is PriorityClass.HIGH:
            return score * self.config.high_boost
        return score

    def boosted(self, request: Request) -> float | None:
        """The score a high request takes in emergency mode (None: it keeps its own). Every high
        waiting when the mode begins takes it too: a boosted newcomer would otherwise outrank an
        older high for (boost - 1) x score / aging seconds (20 s by default), and under a stream
        of highs that one would wait all that time."""
        if not self.emergency or request.priority is not PriorityClass.HIGH or request.boosted:
            return None
        request.boosted = True
        return self.weight(request.priority, request.score)

    def max_wait_s(self, priority: PriorityClass, normal_s: float) -> float:
        if self.emergency and priority is PriorityClass.LOW:
            return min(normal_s, self.config.low_max_wait_s)
        return normal_s
