"""Fair share inside a class: among waiting requests of one class, the next to run is the one whose
caller has received the least service. This is the Virtual Token Counter of "Fairness in Serving
Large Language Models" (Sheng et al., OSDI 2024): each caller's counter grows with the tokens the
engine serves it (prompt and output, weighted), and a caller who comes back after idling is lifted
to the least counter among those waiting, so idle time banks no credit. The class order and aging
are untouched: the queue decides which class goes next, this decides whose request of that class.
Pure: counters in, choices out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from scheduler.request import Request


class VirtualTokenCounter:
    def __init__(self, input_weight: float = 1.0, output_weight: float = 2.0) -> None:
        self.input_weight = input_weight
        self.output_weight = output_weight
        self.counters: dict[str, float] = {}

    def of(self, caller: str) -> float:
        return self.counters.get(caller, 0.0)

    def arrive(self, caller: str, waiting: Iterable[str]) -> None:
        """A caller with nothing waiting joins the queue: lift it to the least-served waiter."""
        self.lift(caller, min((self.of(c) for c in waiting if c != caller), default=None))

    def lift(self, caller: str, floor: float | None) -> None:
        if floor is not None and floor > self.of(caller):
            self.counters[caller] = floor

    def charge(self, caller: str, prompt_tokens: int = 0, output_tokens: int = 0) -> None:
        self.counters[caller] = self.of(caller) + self.input_weight * prompt_tokens + self.output_weight * output_tokens

    def ranking(self, ranked: Sequence[Request]) -> list[Request]:
        """The queue's order with each class's places handed out fairly: round by round, one
        request per caller, least served first. Where each waiter stands, for its position."""
        by_class: dict[object, list[Request]] = defaultdict(list)
        for request in ranked:
            by_class[request.priority].append(request)
        fair = {cls: iter(self._rounds(members)) for cls, members in by_class.items()}
        return [next(fair[request.priority]) for request in ranked]

    def ahead_in_class(self, caller: str, members: Iterable[Request]) -> int:
        """How many of a class's waiters a new request from `caller` would wait behind: its own,
        and from every other caller as many as the rounds before its turn."""
        counts: dict[str, int] = defaultdict(int)
        for request in members:
            counts[request.caller] += 1
        own = counts.pop(caller, 0)
        return own + sum(min(n, own + 1) for n in counts.values())

    def _rounds(self, members: list[Request]) -> list[Request]:
        queues: dict[str, list[Request]] = defaultdict(list)
        for request in members:
            queues[request.caller].append(request)
        callers = sorted(queues, key=self.of)
        out: list[Request] = []
        for turn in range(max(len(q) for q in queues.values())):
            out.extend(queues[c][turn] for c in callers if turn < len(queues[c]))
        return out
