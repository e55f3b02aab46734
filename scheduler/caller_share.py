"""Each caller's share of the engine: its running limit (`max_parallel`; more of its requests
wait) and, with fair share on, its served-token counter and the index that finds the least-served
waiter of a class, which the fair order reads (scheduler/policy.py). Pure: it reads the queue and
keeps per-caller counts; the loop calls it as requests arrive, start, produce and end."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from scheduler.fair_index import FairIndex
from scheduler.fair_share import VirtualTokenCounter
from scheduler.positions import QueuePositions
from scheduler.queue import PriorityQueue
from scheduler.request import PriorityClass, Request, RequestKey


class CallerShare:
    def __init__(self, fair: VirtualTokenCounter | None) -> None:
        self.fair = fair
        self.running_of: Counter[str] = Counter()
        self._positions = QueuePositions(fair)
        self._index: FairIndex | None = None
        self._indexed: PriorityQueue | None = None

    def joining(self, request: Request, queue: PriorityQueue) -> None:
        """Before `request` is queued: a caller with nothing waiting starts level with the others."""
        if self.fair is None or queue.waiting_of(request.caller):
            return
        if len(queue):
            self.fair.lift(request.caller, self._index_of(queue, self.fair).least_counter())
        else:
            self.fair.arrive(request.caller, list(self.running_of))

    def joined(self, request: Request, queue: PriorityQueue) -> None:
        """After `request` is queued."""
        if self.fair is None:
            return
        if self._index is None or self._indexed is not queue:
            self._index_of(queue, self.fair)  # takes in the whole queue, `request` included
        else:
            self._index.add(request)

    def least_served(self, queue: PriorityQueue, priority: PriorityClass) -> Request | None:
        """The best waiter of `priority` whose caller has been served least and may run now (None
        without fair share)."""
        if self.fair is None:
            return None
        return self._index_of(queue, self.fair).pick(priority, self.may_run)

    def _index_of(self, queue: PriorityQueue, fair: VirtualTokenCounter) -> FairIndex:
        if self._index is None or self._indexed is not queue:
            self._index, self._indexed = FairIndex(fair, queue), queue
        return self._index

    def may_run(self, request: Request) -> bool:
        return request.max_parallel is None or self.running_of[request.caller] < request.max_parallel

    def started(self, request: Request) -> None:
        self.running_of[request.caller] += 1
        self.served(request.caller, prompt_tokens=request.prompt.num_tokens)

    def resumed(self, request: Request) -> None:
        """Back in the engine after giving its slot up: running again, its prompt charged once already."""
        self.running_of[request.caller] += 1

    def served(self, caller: str, prompt_tokens: int = 0, output_tokens: int = 0) -> None:
        if self.fair is not None:
            self.fair.charge(caller, prompt_tokens, output_tokens)

    def ended(self, request: Request) -> None:
        self.running_of[request.caller] -= 1
        if self.running_of[request.caller] <= 0:
            del self.running_of[request.caller]

    def position(self, queue: PriorityQueue, key: RequestKey, now: float | None = None) -> int | None:
        return self._positions.of(queue, key, now)

    def displaced_by(
        self, newcomer: Request, queue: PriorityQueue, may_take: Callable[[Request], bool] = lambda r: True
    ) -> Request | None:
        """In a full queue, the place a newcomer may take so one caller cannot hold them all: the
        newest waiter of its class's heaviest caller, when that caller holds at least two places
        more than the newcomer's."""
        if self.fair is None:
            return None
        members = queue.members(newcomer.priority)
        held = Counter(r.caller for r in members)
        heaviest, places = max(held.items(), key=lambda item: item[1], default=(None, 0))
        if heaviest is None or heaviest == newcomer.caller or places < held[newcomer.caller] + 2:
            return None
        return next((r for r in reversed(members) if r.caller == heaviest and may_take(r)), None)

    def ahead_of_new(self, request: Request, queue: PriorityQueue) -> int:
        """Waiters a newcomer would wait behind: the queue's count, its own class counted fairly."""
        ahead = queue.count_ahead_of_new(request.score, request.arrival)
        if self.fair is None:
            return ahead
        members = queue.members(request.priority)
        return ahead - len(members) + self.fair.ahead_in_class(request.caller, members)
