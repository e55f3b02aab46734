"""Relay a ticket's events to the HTTP client: a JSON body, or a stream of server-sent events."""

from __future__ import annotations

import asyncio
from typing import Callable

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from api.errors import APIError
from api.openai_format import Completion
from api.streaming import NOTICE_INTERVAL_S, TicketStream, ticket_events
from engine.base import Delta
from scheduler.loop import Scheduler
from scheduler.request import Dispatched, SchedulerError, Ticket


def headers_for(ticket: Ticket, wait_s: float, extra: dict[str, str]) -> dict[str, str]:
    return {"X-Request-ID": ticket.request_id, "X-Queue-Wait-Ms": f"{wait_s * 1000:.0f}",
            "X-Priority": ticket.request.priority.value, **extra}


async def stream_ticket(scheduler: Scheduler, ticket: Ticket, completion: Completion, include_usage: bool,
                        extra: dict[str, str], after: Callable[[], None]) -> Response:
    """Wait briefly for dispatch so most streams carry their exact queue wait in the headers; a
    stream still queued after that opens anyway and reports its place in SSE comments."""
    try:
        first = await ticket.next_event(timeout=NOTICE_INTERVAL_S)
    except asyncio.CancelledError:
        _release(scheduler, ticket, after)
        raise
    if isinstance(first, SchedulerError):
        _release(scheduler, ticket, after)
        raise APIError.from_scheduler(first)
    wait = first.queue_wait_s if isinstance(first, Dispatched) else scheduler.clock() - ticket.request.arrival
    ticket.stream_open = True
    return TicketStream(
        ticket_events(scheduler, ticket, completion, first, include_usage),
        on_close=lambda: _release(scheduler, ticket, after),
        headers=headers_for(ticket, wait, extra),
    )


async def complete_ticket(request: Request, scheduler: Scheduler, ticket: Ticket, completion: Completion,
                          extra: dict[str, str], after: Callable[[], None]) -> Response:
    collect = asyncio.ensure_future(_collect(ticket, completion))
    gone = asyncio.ensure_future(_client_gone(request))
    try:
        await asyncio.wait({collect, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not collect.done():
            collect.cancel()
        _release(scheduler, ticket, after)
    if not collect.done() or collect.cancelled():
        return Response(status_code=499)
    try:
        wait = collect.result()
    except APIError as exc:
        exc.headers.update(headers_for(ticket, scheduler_wait(ticket), extra))
        raise
    return JSONResponse(completion.body(), headers=headers_for(ticket, wait, extra))


def scheduler_wait(ticket: Ticket) -> float:
    request = ticket.request
    return (request.dispatched_at or request.arrival) - request.arrival


async def _collect(ticket: Ticket, completion: Completion) -> float:
    wait = 0.0
    while True:
        event = await ticket.next_event()
        if isinstance(event, Dispatched):
            wait = event.queue_wait_s
        elif isinstance(event, SchedulerError):
            raise APIError.from_scheduler(event)
        elif isinstance(event, Delta):
            if event.finish_reason == "abort":
                raise APIError(503, "generation was aborted by the engine", code="aborted")
            completion.add(event)
            if event.finish_reason:
                return wait


async def _client_gone(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _release(scheduler: Scheduler, ticket: Ticket, after: Callable[[], None]) -> None:
    ticket.close()
    scheduler.cancel(ticket.request_id)
    after()
