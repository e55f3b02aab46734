"""Factory helpers for scheduler tests: requests and schedulers with exact, small knobs."""

from __future__ import annotations

import itertools

from core.types import GenParams, Prompt
from scheduler.request import PriorityClass, Request

_ids = itertools.count()

WEIGHTS = {PriorityClass.HIGH: 10.0, PriorityClass.MEDIUM: 5.0, PriorityClass.LOW: 1.0}


def make_request(
    cls: PriorityClass = PriorityClass.MEDIUM,
    arrival: float = 0.0,
    score: float | None = None,
    prompt_tokens: int = 10,
    max_tokens: int = 10,
    request_id: str | None = None,
    caller: str = "anonymous",
    **extra,
) -> Request:
    return Request(
        request_id=request_id or f"r{next(_ids)}",
        caller=caller,
        priority=cls,
        score=WEIGHTS[cls] if score is None else score,
        prompt=Prompt(prompt_tokens),
        params=GenParams(max_tokens=max_tokens),
        arrival=arrival,
        **extra,
    )


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
