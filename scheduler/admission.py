"""Admission policy: what the engine may hold at once, by slots and by tokens."""

from __future__ import annotations

from scheduler.request import Request


class AdmissionController:
    """Admits while a slot is free and the running requests' worst-case tokens (prompt plus
    max_tokens, rounded up to the engine's KV block size) stay within the engine's KV budget, so
    an admitted request never runs the engine out of memory. `paused` stops admissions without
    touching what is running."""

    def __init__(self, max_concurrency: int, token_budget: int, block_size: int = 1) -> None:
        self.max_concurrency = max_concurrency
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

    def cost(self, request: Request) -> int:
        blocks = -(-request.cost_tokens // self.block_size)
        return blocks * self.block_size

    def can_ever_fit(self, request: Request) -> bool:
        return self.cost(request) <= self.token_budget

    def fits(self, request: Request) -> bool:
        return (
            not self.paused
            and len(self._running) < self.max_concurrency
            and self.tokens_in_use + self.cost(request) <= self.token_budget
        )

    def admit(self, request: Request) -> None:
        cost = self.cost(request)
        self._running[request.request_id] = cost
        self.tokens_in_use += cost

    def release(self, request_id: str) -> None:
        self.tokens_in_use -= self._running.pop(request_id, 0)
