"""Admission policy: what the engine may hold at once, by slots and by tokens."""

from __future__ import annotations

from scheduler.request import PriorityClass, Request


class AdmissionController:
    """Admits while a slot is free and the running requests' worst-case tokens (prompt plus
    max_tokens, rounded up to the engine's KV block size) stay within the engine's KV budget, so
    an admitted request never runs the engine out of memory. `paused` stops admissions without
    touching what is running. A share of the limit (`high_reserve`, rounded down) is kept from low
    and medium requests, and high ones may run that far above it (never past `upper`, the engine's
    slots): high finds a slot under load, and a limit that just shrank stops only the others."""

    def __init__(self, max_concurrency: int, token_budget: int, block_size: int = 1,
                 high_reserve: float = 0.0, upper: int | None = None) -> None:
        self.max_concurrency = max_concurrency
        self.high_reserve = high_reserve
        self.upper = upper or max_concurrency
        self.token_budget = token_budget
        self.block_size = block_size
        self.paused = False
        self._running: dict[str, int] = {}
        self.tokens_in_use = 0

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def free_slots(self) -> int:
        return max(0, self.max_concurrency - len(self._running))

    def slots_for(self, priority: PriorityClass) -> int:
        reserve = int(self.max_concurrency * self.high_reserve)
        if priority is PriorityClass.HIGH:
            return max(self.max_concurrency, min(self.upper, self.max_concurrency + reserve))
        return max(1, self.max_concurrency - reserve)

    def cost(self, request: Request) -> int:
        blocks = -(-request.cost_tokens // self.block_size)
        return blocks * self.block_size

    def can_ever_fit(self, request: Request) -> bool:
        return self.cost(request) <= self.token_budget

    def fits(self, request: Request) -> bool:
        return (
            not self.paused
            and len(self._running) < self.slots_for(request.priority)
            and self.tokens_in_use + self.cost(request) <= self.token_budget
        )

    def admit(self, request: Request) -> None:
        cost = self.cost(request)
        self._running[request.request_id] = cost
        self.tokens_in_use += cost

    def release(self, request_id: str) -> None:
        self.tokens_in_use -= self._running.pop(request_id, 0)
