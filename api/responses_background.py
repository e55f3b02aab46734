"""Background responses (`background: true`): the client gets `queued` at once and polls; the run
goes on in a task here, its state written to the store as it changes, and `cancel` stops it in
the queue or the engine. The door has already spoken before a background response is accepted:
a 429 then is a 429 now."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from pipeline.chat import ChatRun
from pipeline.events import Finished, Refused, Started
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
            async for event in run.events():
                if isinstance(event, Started):
                    await save(shape.envelope("in_progress", []))
                elif isinstance(event, Finished):
                    await save(shape.finished(event, shape.output_items(event)))
                    return
                elif isinstance(event, Refused):
                    await save(shape.failed(event.refusal, []))
                    return
        except asyncio.CancelledError:
            stopped = Refusal(503, "the server stopped before this background response finished; send it again",
                              code="server_error")
            await asyncio.shield(save(shape.failed(stopped, []) if self._stopping else shape.envelope("cancelled", [])))
            raise
        except Exception:
            log.exception("background response %s failed", shape.id)
            await save(shape.failed(Refusal(500, "the background run failed", code="server_error"), []))
        finally:
            run.release()
