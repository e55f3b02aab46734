"""Time requests spend waiting in our queue while the engine could have taken more: slots free
below the engine's own limit (or `max_concurrency`) and tokens free, admission not paused. Work held
back by our running limit or by the slots kept for high shows here per class, so a scheduler that
costs people time at light load is visible in operation. Pure: the dispatcher marks each change
of the queue or of what runs; between two marks the waiters counted at the first one accrue."""

from __future__ import annotations

from scheduler.admission import AdmissionController
from scheduler.queue import PriorityQueue
from scheduler.request import PriorityClass


class IdleWaits:
    def __init__(self) -> None:
        self.total_s: dict[PriorityClass, float] = dict.fromkeys(PriorityClass, 0.0)
        self._since: float | None = None
        self._waiting: dict[PriorityClass, int] = {}

    def mark(self, now: float, queue: PriorityQueue, admission: AdmissionController) -> None:
        if self._since is not None:
            for cls, n in self._waiting.items():
                self.total_s[cls] += n * (now - self._since)
        idle = len(queue) > 0 and _room(admission)
        self._since = now if idle else None
        self._waiting = {c: queue.count(c) for c in PriorityClass} if idle else {}


def _room(admission: AdmissionController) -> bool:
    tokens_free = admission.token_budget is None or admission.tokens_in_use < admission.token_budget
    return not admission.paused and admission.running < admission.upper and tokens_free
