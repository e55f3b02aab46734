"""Sequences an engine has set aside for the scheduler: aborted in the engine, their streams kept
open, each waiting for its resume. A pending suspension is one not yet taken up by the stream's
`wait`, so a resume that comes before the engine's abort reaches the stream is not lost."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from core.types import GenParams


def remaining(params: GenParams, written: int) -> GenParams:
    """The sampling of a sequence resumed after `written` tokens: what is left of it."""
    if not written:
        return params
    return replace(params, max_tokens=params.max_tokens - written, min_tokens=max(0, params.min_tokens - written))


class Suspensions:
    def __init__(self) -> None:
        self._gates: dict[str, asyncio.Event] = {}

    def suspend(self, request_id: str) -> None:
        self._gates.setdefault(request_id, asyncio.Event()).clear()

    def resume(self, request_id: str) -> None:
        if (gate := self._gates.get(request_id)) is not None:
            gate.set()

    def pending(self, request_id: str) -> bool:
        return request_id in self._gates

    async def wait(self, request_id: str) -> None:
        """Until the resume (at once if it came already); the suspension is then used up."""
        gate = self._gates.get(request_id)
        try:
            if gate is not None:
                await gate.wait()
        finally:
            self._gates.pop(request_id, None)

    def forget(self, request_id: str) -> None:
        self._gates.pop(request_id, None)
