"""One answer twice on a real engine behind a live server, in the server's own event loop: once
straight through, once suspended after `cut_at` deltas and resumed 0.3 s later."""

from __future__ import annotations

import asyncio

from core.types import ChatMessage, Delta, GenParams
from tests.conftest import LiveServer

COUNT = "Count from one to fifty, in words."


def plain_and_resumed(
    live: LiveServer, max_tokens: int, cut_at: int, ask: str = COUNT
) -> tuple[list[Delta], list[Delta]]:
    engine = live.services.engine
    timer = live.services.scheduler._timer
    assert timer is not None

    async def both() -> tuple[list[Delta], list[Delta]]:
        prompt = await engine.prepare([ChatMessage("user", ask)])
        params = GenParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
        plain = [d async for d in engine.generate("resume-plain", prompt, params)]
        pieces: list[Delta] = []
        async for delta in engine.generate("resume-cut", prompt, params):
            pieces.append(delta)
            if len(pieces) == cut_at:
                engine.suspend("resume-cut")
                asyncio.get_running_loop().call_later(0.3, engine.resume, "resume-cut")
        return plain, pieces

    return asyncio.run_coroutine_threadsafe(both(), timer.get_loop()).result(120)
