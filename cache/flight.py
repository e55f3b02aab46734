"""Single flight: identical deterministic requests in progress share one generation."""

from __future__ import annotations

import asyncio

from cache.store import CachedResponse


class SingleFlight:
    def __init__(self) -> None:
        self._leaders: dict[str, asyncio.Future] = {}

    def follow(self, digest: str) -> asyncio.Future | None:
        """The leader's future to await, or None: the caller leads and must call `finish`."""
        leader = self._leaders.get(digest)
        if leader is not None:
            return leader
        self._leaders[digest] = asyncio.get_running_loop().create_future()
        return None

    def finish(self, digest: str, result: CachedResponse | None) -> None:
        """Hand the answer (None: the leader failed) to every follower; safe to call twice."""
        leader = self._leaders.pop(digest, None)
        if leader is not None and not leader.done():
            leader.set_result(result)

    def __len__(self) -> int:
        return len(self._leaders)
