"""A started chat run relayed to the HTTP client: one JSON body, or server-sent events with queue
notices while it waits."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from api.errors import error_response
from pipeline.chat import ChatRun
from pipeline.events import Event, EventRenderer, Finished, Queued, Refused, Started, is_final, render
from protocols.openai_chat.render import ChatStream, CompletionFormat

T = TypeVar("T")


def run_headers(run: ChatRun, wait_s: float) -> dict[str, str]:
    headers = {
        "X-Request-ID": run.request_id,
        "X-Queue-Wait-Ms": f"{wait_s * 1000:.0f}",
        "X-Priority": run.priority.value,
        "X-Cache": run.cache_status,
        **run.rate_headers,
    }
    if run.reasoning_effort is not None:
        headers["X-Reasoning-Effort"] = run.reasoning_effort
    if (similar := run.plan.similar) is not None and run.hit is not None:
        headers["X-Cache-Similarity"] = f"{similar.similarity:.2f}"
        headers["X-Cache-Source"] = similar.digest
    return headers


Render = Callable[[Event, AsyncIterator[Event]], AsyncIterator[str]]


async def stream_response(
    run: ChatRun,
    render: Render,
    headers: dict[str, str] | None = None,
    path: str = "",
    media_type: str = "text/event-stream",
) -> Response:
    """The first event decides the status: a refusal is an HTTP error; otherwise the stream opens,
    carrying the exact queue wait in its headers when the run started within a notice interval.
    `render` turns the events, the first included, into the stream's text."""
    events = run.events()
    try:
        first = await anext(events)
    except BaseException:
        await events.aclose()
        raise
    if isinstance(first, Refused):
        await events.aclose()
        return error_response(first.refusal, {**run_headers(run, 0.0), **(headers or {})}, path)
    wait = first.waited_s if isinstance(first, Queued) else first.queue_wait_s if isinstance(first, Started) else 0.0
    return EventStream(
        render(first, events),
        on_close=events.aclose,
        headers={**run_headers(run, wait), **(headers or {})},
        media_type=media_type,
    )


def chat_stream(fmt: CompletionFormat, include_usage: bool) -> Render:
    return lambda first, events: rendered(first, events, ChatStream(fmt, include_usage))


async def complete_response(
    request: Request,
    run: ChatRun,
    body: Callable[[Finished], dict | Awaitable[dict]],
    headers: dict[str, str] | None = None,
) -> Response:
    outcome = asyncio.ensure_future(collect(run.events()))
    gone = asyncio.ensure_future(_client_gone(request))
    try:
        await asyncio.wait({outcome, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not outcome.done():
            outcome.cancel()
        run.release()
    if not outcome.done() or outcome.cancelled():
        return Response(status_code=499)
    last, wait = outcome.result()
    if isinstance(last, Refused):
        return error_response(last.refusal, {**run_headers(run, wait), **(headers or {})}, request.url.path)
    rendered = body(last)
    if inspect.isawaitable(rendered):
        rendered = await rendered
    return JSONResponse(rendered, headers={**run_headers(run, wait), **(headers or {})})


async def unless_client_leaves(request: Request, work: Awaitable[T]) -> T | None:
    """`work`'s result, or None once the client has gone: starting a call can wait long (on an
    identical request's answer), and it is cancelled rather than finished for nobody."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_client_gone(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return None


class EventStream(StreamingResponse):
    """A streaming response that closes its run however it ends, even if the client left before
    the first byte."""

    def __init__(
        self,
        content: AsyncIterator[str],
        on_close: Callable,
        headers: dict[str, str],
        media_type: str = "text/event-stream",
    ) -> None:
        super().__init__(content, media_type=media_type, headers=headers)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._on_close()


async def rendered(
    first: Event, events: AsyncIterator[Event], renderer: EventRenderer[list[str]]
) -> AsyncIterator[str]:
    """The stream's text: each event as its renderer writes it, until the one that ends the call."""
    event: Event | None = first
    while event is not None:
        for line in await render(event, renderer):
            yield line
        if is_final(event):
            return
        event = await anext(events, None)


async def collect(events: AsyncIterator[Event]) -> tuple[Finished | Refused, float]:
    wait = 0.0
    async for event in events:
        if isinstance(event, Started):
            wait = event.queue_wait_s
        elif isinstance(event, (Finished, Refused)):
            return event, wait
    raise RuntimeError("the run ended without an outcome")


async def _client_gone(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
