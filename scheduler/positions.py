"""Where each waiter stands, for the queue notices. Every waiting stream asks about once a second,
and at thousands of waiters a ranking per change of the queue would be a sort per arrival. So the
ranking is redone at most once per `RANK_S_PER_WAITER` x waiters (a bounded share of the CPU at
any size: 10,000 waiters are re-ranked once a second), and a waiter that joined since is placed
by bisecting the last ranking. Pure: the caller passes the time."""

from __future__ import annotations

import bisect
import math

from scheduler.fair_share import VirtualTokenCounter
from scheduler.queue import PriorityQueue
from scheduler.request import RequestKey

RANK_S_PER_WAITER = 1e-4


class QueuePositions:
    def __init__(self, fair: VirtualTokenCounter | None) -> None:
        self.fair = fair
        self._positions: dict[RequestKey, int] = {}
        self._keys: list[float] = []  # the last ranking's queue keys, best first, negated to ascend
        self._version = -1
        self._ranked_at = -math.inf

    def of(self, queue: PriorityQueue, key: RequestKey, now: float | None = None) -> int | None:
        """1-based place in the order requests will start, or None when not waiting. Without
        `now`, always up to date. Counters alone do not reorder what is shown."""
        request = queue.get(key)
        if request is None:
            return None
        due = now is None or now - self._ranked_at >= len(queue) * RANK_S_PER_WAITER
        if self._version != queue.version and due:
            self._rank(queue, -math.inf if now is None else now)
        place = self._positions.get(key)
        if place is None:
            place = bisect.bisect_right(self._keys, -queue.key(request)) + 1
        return min(place, len(queue))

    def _rank(self, queue: PriorityQueue, now: float) -> None:
        ranked = queue.ranked()
        self._keys = [-queue.key(r) for r in ranked]
        if self.fair is not None:
            ranked = self.fair.ranking(ranked)
        self._positions = {r.key: i for i, r in enumerate(ranked, start=1)}
        self._version, self._ranked_at = queue.version, now
