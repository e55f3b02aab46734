"""Emergency mode: under pressure, favour high requests and shorten how long new ones may wait.

A high the door accepts past its first-token objective is late whatever happens next, and while
it waits it holds its place ahead of later highs that could still be on time: when high traffic
alone is about what the engine serves (5x capacity, 20 % high), the high queue grew and every high
behind it missed (vLLM's CPU build: 0.01-0.07 of capacity on time against 0.44-0.62 for the engine
alone at 1x). Refused with Retry-After before its stream opens, it is retried by its client (the
`openai` SDK does) once the surge passes."""

from __future__ import annotations

from scheduler.request import PriorityClass, Request
from settings.schema import PressureConfig


class PressureMonitor:
    def __init__(self, config: PressureConfig, ttft_objective_s: float) -> None:
        self.config = config
        self.ttft_objective_s = ttft_objective_s
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

    def max_wait_s(self, priority: PriorityClass, normal_s: float, high_start_s: float = 0.0) -> float:
        """The wait the door promises a newcomer; for high in emergency mode, by default what its
        first-token objective leaves after `high_start_s`, the time highs take from start to first token."""
        if self.emergency and priority is PriorityClass.LOW:
            return min(normal_s, self.config.low_max_wait_s)
        if self.emergency and priority is PriorityClass.HIGH:
            return min(normal_s, self.config.high_max_wait_s or max(0.0, self.ttft_objective_s - high_start_s))
        return normal_s
