"""Admission policy: what the engine may hold at once, by slots and by tokens."""

from __future__ import annotations

from scheduler.request import Request


class AdmissionController:
    """Admits while a slot is free and the running requests' worst-case tokens (prompt plus
    max_tokens) stay within the engine's KV budget, so an admitted request never runs the engine
    out of memory. `paused` stops admissions without touching what is running."""

    def __init__(self, max_concurrency: int, token_budget: int) -> None:
        self.max_concurrency = max_concurrency
        self.token_budget = token_budget
        self.paused = False
        self._running: dict[str, int] = {}
        self.tokens_in_use = 0

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def free_slots(self) -> int:
        return max(0, self.max_concurrency - len(self._running))

    def can_ever_fit(self, request: Request) -> bool:
        return request.cost_tokens <= self.token_budget

    def fits(self, request: Request) -> bool:
        return (
            not self.paused
            and len(self._running) < self.max_concurrency
            and self.tokens_in_use + request.cost_tokens <= self.token_budget
        )

    def admit(self, request: Request) -> None:
        self._running[request.request_id] = request.cost_tokens
        self.tokens_in_use += request.cost_tokens

    def release(self, request_id: str) -> None:
        self.tokens_in_use -= self._running.pop(request_id, 0)
