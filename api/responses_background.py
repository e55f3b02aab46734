"""Background responses (`background: true`): the client gets `queued` at once and polls; the run
goes on in a task here, its state written to the store as it changes, and `cancel` stops it in
the queue or the engine. The door has already spoken before a background response is accepted:
a 429 then is a 429 now."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from pipeline.chat import ChatRun
from pipeline.events import (
    Finished,
    Queued,
    ReasoningDelta,
    Refused,
    Started,
    TextDelta,
    ToolCallPiece,
    is_final,
    render,
)
from pipeline.refusal import Refusal
from protocols.openai_responses.render import ResponseShape

log = logging.getLogger("gpt_oss_webui.api")
Save = Callable[[dict], Awaitable[None]]


class BackgroundResponses:
    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task] = {}
        self._stopping = False

    def start(self, run: ChatRun, shape: ResponseShape, save: Save) -> None:
        task = asyncio.create_task(self._run(run, shape, save), name=f"background-{shape.id}")
        self._tasks[shape.id] = task
        task.add_done_callback(lambda _: self._tasks.pop(shape.id, None))

    async def cancel(self, response_id: str) -> bool:
        """Whether a run was stopped; it saves itself as cancelled."""
        task = self._tasks.get(response_id)
        if task is None:
            return False
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return True

    async def stop(self) -> None:
        self._stopping = True
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def _run(self, run: ChatRun, shape: ResponseShape, save: Save) -> None:
        try:
            states = _StoredStates(shape, save)
            async for event in run.events():
                await render(event, states)
                if is_final(event):
                    return
        except asyncio.CancelledError:
            stopped = Refusal(
                503, "the server stopped before this background response finished; send it again", code="server_error"
            )
            await asyncio.shield(save(shape.failed(stopped, []) if self._stopping else shape.envelope("cancelled", [])))
            raise
        except Exception:
            log.exception("background response %s failed", shape.id)
            await save(shape.failed(Refusal(500, "the background run failed", code="server_error"), []))
        finally:
            run.release()


class _StoredStates:
    """A background response's states as the store keeps them: in progress once it starts, then
    completed (or incomplete) or failed; the deltas between are not stored one by one."""

    def __init__(self, shape: ResponseShape, save: Save) -> None:
        self.shape, self.save = shape, save

    async def queued(self, event: Queued) -> None:
        pass

    async def started(self, event: Started) -> None:
        await self.save(self.shape.envelope("in_progress", []))

    async def reasoning(self, event: ReasoningDelta) -> None:
        pass

    async def text(self, event: TextDelta) -> None:
        pass

    async def tool_call(self, event: ToolCallPiece) -> None:
        pass

    async def finished(self, event: Finished) -> None:
        await self.save(self.shape.finished(event, self.shape.output_items(event)))

    async def refused(self, event: Refused) -> None:
        await self.save(self.shape.failed(event.refusal, []))
