"""Who is least served, in O(log n): per class, a heap of each caller's waiters (best first) and a
heap of callers ordered by (counter, best waiter), the structure of the VTC paper (a queue per
client). Both heaps are lazy: a waiter that left the queue, or a caller whose counter or best
waiter changed, is corrected when it reaches the top. That is enough because counters only grow
and a caller's best only worsens between arrivals: a stale entry sorts ahead of its true place,
so it is always met and fixed before it could be skipped. A new waiter pushes a fresh entry. Pure."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from scheduler.fair_share import VirtualTokenCounter
from scheduler.queue import PriorityQueue
from scheduler.request import PriorityClass, Request

_Waiter = tuple[float, int, Request]  # (-key, order, request)
_Entry = tuple[float, float, int, str]  # (counter, -best key, order, caller)


class FairIndex:
    """Follows one queue: what joins it is added as it joins; what left it is dropped when met."""

    def __init__(self, counter: VirtualTokenCounter, queue: PriorityQueue) -> None:
        self.counter, self.key, self.alive = counter, queue.key, queue.holds
        self._order = itertools.count()
        self._waiters: dict[PriorityClass, dict[str, list[_Waiter]]] = {c: {} for c in PriorityClass}
        self._callers: dict[PriorityClass, list[_Entry]] = {c: [] for c in PriorityClass}
        self._current: dict[PriorityClass, dict[str, int]] = {c: {} for c in PriorityClass}  # live entry, by order
        for request in queue:
            self.add(request)

    def add(self, request: Request) -> None:
        """A waiter no better than its caller's best leaves the caller's entry as it is: that
        entry sorts no later than its true place, which is all the lazy heap needs."""
        cls, caller, neg_key = request.priority, request.caller, -self.key(request)
        waiters = self._waiters[cls].setdefault(caller, [])
        better = caller not in self._current[cls] or neg_key < waiters[0][0]
        heapq.heappush(waiters, (neg_key, next(self._order), request))
        if better:
            order = self._current[cls][caller] = next(self._order)
            heapq.heappush(self._callers[cls], (self.counter.of(caller), neg_key, order, caller))

    def pick(self, priority: PriorityClass, may_run: Callable[[Request], bool]) -> Request | None:
        """The best waiter of the least-served caller of `priority` who may run now."""
        heap, current, counters = self._callers[priority], self._current[priority], self.counter.counters
        waiters_of, alive = self._waiters[priority], self.alive
        held, found = [], None
        while heap:
            counter, neg_best, order, caller = heap[0]
            if current.get(caller) != order:
                heapq.heappop(heap)  # superseded by a newer entry of the same caller
                continue
            waiters = waiters_of[caller]
            while waiters and not alive(waiters[0][2]):
                heapq.heappop(waiters)
            if not waiters:
                del waiters_of[caller], current[caller]
                heapq.heappop(heap)
            elif counter != counters.get(caller, 0.0) or neg_best != waiters[0][0]:
                order = current[caller] = next(self._order)
                heapq.heapreplace(heap, (counters.get(caller, 0.0), waiters[0][0], order, caller))
            elif not may_run(waiters[0][2]):
                held.append(heapq.heappop(heap))
            else:
                found = waiters[0][2]
                break
        for entry in held:
            heapq.heappush(heap, entry)
        if len(heap) >= 1024:
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

    def _compact(self, priority: PriorityClass) -> None:
        """Superseded entries pile up as waiters arrive; drop them when they outnumber the callers."""
        heap, current = self._callers[priority], self._current[priority]
        if len(heap) < 4 * len(current):
            return
        self._callers[priority] = [e for e in heap if current.get(e[3]) == e[2]]
        heapq.heapify(self._callers[priority])
