"""Sequences an engine has set aside for the scheduler: aborted in the engine, their streams kept
open, each waiting for its resume."""

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
    """Each suspension its own event and number: a resume wakes the stream's wait, and a stream
    knows a suspension came since it started when the number moved, even if the resume came too."""

    def __init__(self) -> None:
        self._gates: dict[str, asyncio.Event] = {}
        self._count: dict[str, int] = {}

    def suspend(self, request_id: str) -> None:
        self._gates[request_id] = asyncio.Event()
        self._count[request_id] = self._count.get(request_id, 0) + 1

    def resume(self, request_id: str) -> None:
        if (gate := self._gates.get(request_id)) is not None:
            gate.set()

    def count(self, request_id: str) -> int:
        return self._count.get(request_id, 0)

    async def wait(self, request_id: str) -> None:
        """Until every suspension so far is resumed (at once when none waits)."""
        while (gate := self._gates.get(request_id)) is not None:
            await gate.wait()
            if self._gates.get(request_id) is gate:
                del self._gates[request_id]

    def forget(self, request_id: str) -> None:
        self._gates.pop(request_id, None)
        self._count.pop(request_id, None)
