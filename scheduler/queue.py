"""The waiting queue policy: effective score with linear aging, FIFO among equals.

Effective score at time t is `score + aging * (t - arrival)`. Aging is the same for everyone, so
ordering by the static key `score - aging * arrival` is ordering by effective score at any t:
the heap key never changes and insert and pop stay O(log n).
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator

from scheduler.request import PriorityClass, Request, RequestKey


class PriorityQueue:
    def __init__(self, aging_per_s: float) -> None:
        self.aging_per_s = aging_per_s
        self._heap: list[tuple[float, int, Request]] = []
        self._order = itertools.count()
        self._members: dict[RequestKey, Request] = {}
        self._entries: dict[RequestKey, int] = {}  # each waiter's live heap entry, by its order; others are stale
        self._by_class: dict[PriorityClass, OrderedDict[RequestKey, Request]] = {
            c: OrderedDict() for c in PriorityClass
        }
        self._by_caller: Counter[str] = Counter()
        self._version = 0
        self._ranked: list[Request] = []
        self._ranked_version = -1

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, key: RequestKey) -> bool:
        return key in self._members

    def __iter__(self) -> Iterator[Request]:
        return iter(list(self._members.values()))

    def key(self, request: Request) -> float:
        return request.score - self.aging_per_s * request.arrival

    def effective_score(self, request: Request, now: float) -> float:
        return request.score + self.aging_per_s * (now - request.arrival)

    def push(self, request: Request) -> None:
        order = next(self._order)
        heapq.heappush(self._heap, (-self.key(request), order, request))
        self._members[request.key] = request
        self._entries[request.key] = order
        self._by_class[request.priority][request.key] = request
        self._by_caller[request.caller] += 1
        self._version += 1

    def rescore(self, request: Request, score: float) -> None:
        """A waiter's score changes: it takes its new place, its arrival (and so its aging) kept."""
        request.score = score
        order = next(self._order)
        heapq.heappush(self._heap, (-self.key(request), order, request))
        self._entries[request.key] = order
        self._version += 1

    def holds(self, request: Request) -> bool:
        return self._members.get(request.key) is request

    def peek(self) -> Request | None:
        heap, entries = self._heap, self._entries
        while heap and entries.get((top := heap[0])[2].key) != top[1]:
            heapq.heappop(heap)
        return heap[0][2] if heap else None

    def pop(self) -> Request | None:
        self._drop_stale_top()
        if not self._heap:
            return None
        request = heapq.heappop(self._heap)[2]
        self._forget(request)
        return request

    def remove(self, key: RequestKey) -> Request | None:
        request = self._members.get(key)
        if request is not None:
            self._forget(request)
            if len(self._heap) > 64 and len(self._heap) > 2 * len(self._members):
                self._compact()
        return request

    def count(self, priority: PriorityClass) -> int:
        return len(self._by_class[priority])

    @property
    def version(self) -> int:
        """Changes whenever a request joins or leaves."""
        return self._version

    def members(self, priority: PriorityClass) -> list[Request]:
        """A class's waiters, oldest first."""
        return list(self._by_class[priority].values())

    def waiting_of(self, caller: str) -> int:
        return self._by_caller[caller]

    def callers(self) -> list[str]:
        """Callers with a request waiting."""
        return list(self._by_caller)

    def oldest(self, priority: PriorityClass) -> Request | None:
        members = self._by_class[priority]
        return next(iter(members.values())) if members else None

    def newest_below(self, priority: PriorityClass, may_take: Callable[[Request], bool]) -> Request | None:
        """The most recent waiter `may_take` allows, of the lowest class ranked below `priority`
        that has one."""
        for cls in reversed(PriorityClass):
            if cls.rank <= priority.rank:
                return None
            taken = next((r for r in reversed(self._by_class[cls].values()) if may_take(r)), None)
            if taken is not None:
                return taken
        return None

    def expired(self, now: float, max_wait_s: Callable[[PriorityClass], float]) -> list[Request]:
        """Waiters past their class's limit; only each class's oldest are examined."""
        out = []
        for cls, members in self._by_class.items():
            limit = max_wait_s(cls)
            for request in members.values():
                if now - request.arrival <= limit:
                    break
                out.append(request)
        return out

    def get(self, key: RequestKey) -> Request | None:
        return self._members.get(key)

    def ranked(self) -> list[Request]:
        self._refresh_ranking()
        return list(self._ranked)

    def count_ahead_of_new(self, score: float, now: float) -> int:
        """How many current waiters a request arriving now with `score` would queue behind."""
        new_key = score - self.aging_per_s * now
        return sum(1 for r in self._members.values() if self.key(r) >= new_key)

    def _forget(self, request: Request) -> None:
        del self._members[request.key]
        del self._entries[request.key]
        del self._by_class[request.priority][request.key]
        self._by_caller[request.caller] -= 1
        if not self._by_caller[request.caller]:
            del self._by_caller[request.caller]
        self._version += 1

    def _live(self, entry: tuple[float, int, Request]) -> bool:
        return self._entries.get(entry[2].key) == entry[1]

    def _drop_stale_top(self) -> None:
        while self._heap and not self._live(self._heap[0]):
            heapq.heappop(self._heap)

    def _compact(self) -> None:
        self._heap = [e for e in self._heap if self._live(e)]
        heapq.heapify(self._heap)

    def _refresh_ranking(self) -> None:
        if self._ranked_version == self._version:
            return
        live = [e for e in self._heap if self._live(e)]
        live.sort(key=lambda e: (e[0], e[1]))
        self._ranked = [e[2] for e in live]
        self._ranked_version = self._version
