"""Server-sent events for one ticket, with queue notices while it waits."""

from __future__ import annotations

from typing import AsyncIterator, Callable

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from api.errors import APIError
from api.openai_format import SSE_DONE, Completion, sse, sse_comment
from engine.base import Delta
from scheduler.loop import Scheduler
from scheduler.request import Dispatched, SchedulerError, Ticket
from scheduler.status import request_status

NOTICE_INTERVAL_S = 1.0


class TicketStream(StreamingResponse):
    """A streaming response that releases its ticket however it ends, even if the client left
    before the first byte."""

    def __init__(self, content: AsyncIterator[str], on_close: Callable[[], None], headers: dict[str, str]) -> None:
        super().__init__(content, media_type="text/event-stream", headers=headers)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


async def ticket_events(
    scheduler: Scheduler, ticket: Ticket, completion: Completion, first: object | None, include_usage: bool
) -> AsyncIterator[str]:
    event, waited = first, first is None
    while True:
        if event is None:
            event = await ticket.next_event(timeout=NOTICE_INTERVAL_S)
            if event is None:
                yield queue_notice(scheduler, ticket.request_id)
                continue
        if isinstance(event, Dispatched):
            if waited:
                yield sse_comment(f"dispatched queue_wait_ms={event.queue_wait_s * 1000:.0f}")
            yield completion.chunk({"role": "assistant", "content": ""}, with_usage_field=include_usage)
        elif isinstance(event, SchedulerError):
            yield sse(APIError.from_scheduler(event).body())
            return
        elif isinstance(event, Delta):
            if event.finish_reason == "abort":
                yield sse(APIError(503, "generation was aborted by the engine", code="aborted").body())
                return
            completion.add(event)
            if event.text:
                yield completion.chunk({"content": event.text}, with_usage_field=include_usage)
            if event.finish_reason:
                yield completion.chunk({}, event.finish_reason, with_usage_field=include_usage)
                if include_usage:
                    yield completion.usage_chunk()
                yield SSE_DONE
                return
        event = None


def queue_notice(scheduler: Scheduler, request_id: str) -> str:
    status = request_status(scheduler, request_id)
    if status["state"] != "queued":
        return sse_comment(f"queue state={status['state']}")
    eta = status["estimated_wait_s"]
    return sse_comment(f"queue position={status['position']} estimated_wait_s={'unknown' if eta is None else eta}")
