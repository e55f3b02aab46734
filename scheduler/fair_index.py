"""Who is least served, in O(log n): per class, a heap of each caller's waiters (best first) and a
heap of callers ordered by (counter, best waiter), the structure of the VTC paper (a queue per
client). Both heaps are lazy: a waiter that left the queue, or a caller whose counter or best
waiter changed, is corrected when it reaches the top. That is enough because counters only grow
and a caller's best only worsens between arrivals: a stale entry sorts ahead of its true place,
so it is always met and fixed before it could be skipped. A new waiter pushes a fresh entry. Pure."""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from typing import Callable

from scheduler.fair_share import VirtualTokenCounter
from scheduler.queue import PriorityQueue
from scheduler.request import PriorityClass, Request

_Entry = tuple[float, float, int, str]  # (counter, -best key, order, caller)


class FairIndex:
    """Follows one queue: what joins it is indexed at the next pick; what left it is dropped when met."""

    def __init__(self, counter: VirtualTokenCounter, queue: PriorityQueue) -> None:
        self.counter, self.key, self.alive = counter, queue.key, queue.holds
        self._order = itertools.count()
        self._waiters: dict[tuple[PriorityClass, str], list[tuple[float, int, Request]]] = {}
        self._callers: dict[PriorityClass, list[_Entry]] = defaultdict(list)
        self._current: dict[tuple[PriorityClass, str], int] = {}  # each caller's one live entry, by order
        self._joined = queue.follow_joins()
        for request in queue:
            self._add(request)

    def _add(self, request: Request) -> None:
        waiters = self._waiters.setdefault((request.priority, request.caller), [])
        heapq.heappush(waiters, (-self.key(request), next(self._order), request))
        self._push(request.priority, request.caller, self.key(request))

    def pick(self, priority: PriorityClass, may_run: Callable[[Request], bool]) -> Request | None:
        """The best waiter of the least-served caller of `priority` who may run now."""
        for request in self._joined:
            self._add(request)
        self._joined.clear()
        heap, held, found = self._callers[priority], [], None
        while heap:
            counter, neg_best, order, caller = heap[0]
            if self._current.get((priority, caller)) != order:
                heapq.heappop(heap)  # superseded by a newer entry of the same caller
                continue
            best = self._best(priority, caller)
            if best is None or (counter, neg_best) != (self.counter.of(caller), -self.key(best)):
                heapq.heappop(heap)
                if best is not None:
                    self._push(priority, caller, self.key(best))
            elif not may_run(best):
                held.append(heapq.heappop(heap))
            else:
                found = best
                break
        for entry in held:
            heapq.heappush(heap, entry)
        self._compact(priority)
        return found

    def least_counter(self) -> float | None:
        """The smallest counter among callers with a waiter."""
        found = [c for cls in PriorityClass if (c := self._least(cls)) is not None]
        return min(found, default=None)

    def _least(self, priority: PriorityClass) -> float | None:
        self.pick(priority, lambda r: True)
        heap = self._callers[priority]
        return heap[0][0] if heap else None

    def _best(self, priority: PriorityClass, caller: str) -> Request | None:
        waiters = self._waiters.get((priority, caller))
        while waiters and not self.alive(waiters[0][2]):
            heapq.heappop(waiters)
        if not waiters:
            self._waiters.pop((priority, caller), None)
            self._current.pop((priority, caller), None)
            return None
        return waiters[0][2]

    def _push(self, priority: PriorityClass, caller: str, best_key: float) -> None:
        order = self._current[priority, caller] = next(self._order)
        heapq.heappush(self._callers[priority], (self.counter.of(caller), -best_key, order, caller))

    def _compact(self, priority: PriorityClass) -> None:
        """Superseded entries pile up as waiters arrive; drop them when they outnumber the callers."""
        heap = self._callers[priority]
        if len(heap) < 1024 or len(heap) < 4 * len(self._current):
            return
        self._callers[priority] = [e for e in heap if self._current.get((priority, e[3])) == e[2]]
        heapq.heapify(self._callers[priority])
