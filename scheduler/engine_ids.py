"""The ids the engine runs requests under. Request ids are each caller's own, so two callers may
send the same one at once; an engine (vLLM, the simulator, an upstream that is this server) runs
each id once. A request keeps its client's id in the engine unless a live request holds it
already, then gets that id with a number after it. Pure: the loop takes an id at submit and drops
it when the request leaves."""

from __future__ import annotations

import itertools

_KEPT = 100  # of the client's id before the number: the result stays a valid X-Request-ID (128 at most)


class EngineIds:
    def __init__(self) -> None:
        self._live: set[str] = set()
        self._numbers = itertools.count(1)

    def __contains__(self, engine_id: str) -> bool:
        return engine_id in self._live

    def take(self, request_id: str) -> str:
        engine_id = request_id
        while engine_id in self._live:  # a client may have sent "<id>:<n>" itself
            engine_id = f"{request_id[:_KEPT]}:{next(self._numbers)}"
        self._live.add(engine_id)
        return engine_id

    def drop(self, engine_id: str) -> None:
        self._live.discard(engine_id)
