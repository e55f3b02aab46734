"""POST /v1/chat/completions: validate, hand to the scheduler, relay its answer."""

from __future__ import annotations

import asyncio
import json
import re
import uuid

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from api.auth import identify
from api.errors import APIError
from api.openai_format import Completion
from api.schemas import REQUEST_ID_PATTERN, ChatCompletionRequest, describe
from api.services import Services
from api.streaming import NOTICE_INTERVAL_S, TicketStream, ticket_events
from engine.base import Delta, GenParams
from scheduler.priority import PriorityInput, PriorityInputError, resolve_priority
from scheduler.request import Dispatched, PriorityClass, Request as QueuedRequest, SchedulerError, Ticket
from settings.schema import SchedulerConfig


async def create_chat_completion(request: Request) -> Response:
    services: Services = request.app.state.services
    caller = identify(request, services.config)
    body = parse_body(await request.body())
    batch = _batch_mode(request)
    _check_engine(services, body)
    queued = build_request(services, request, body, caller.priority_key, batch)
    try:
        ticket = services.scheduler.submit(queued)
    except SchedulerError as exc:
        raise _submit_error(exc, body) from None
    completion = Completion.start(queued.request_id, services.engine.capabilities.model, queued.prompt.num_tokens)
    extra = _reasoning_header(services, body)
    if body.stream and not batch:
        return await _stream(services, ticket, completion, body.include_usage, extra)
    return await _complete(request, services, ticket, completion, extra)


def parse_body(raw: bytes) -> ChatCompletionRequest:
    try:
        data = json.loads(raw)
    except ValueError as exc:  # also bad UTF-8 and integers over Python's digit limit
        raise APIError(400, f"request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:
        raise APIError(400, "request body is not valid JSON: nested too deeply", code="invalid_json") from None
    if not isinstance(data, dict):
        raise APIError(400, "request body must be a JSON object", code="invalid_json")
    try:
        body = ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        param, message = describe(exc)
        raise APIError(400, message, param=param, code="invalid_value") from None
    if body.n not in (None, 1):
        raise APIError(400, f"only n=1 is supported; got n={body.n}", param="n", code="invalid_value")
    if len(body.stop_list) > 4:
        raise APIError(400, "stop takes at most 4 sequences", param="stop", code="invalid_value")
    return body


def build_request(services: Services, request: Request, body: ChatCompletionRequest, priority_key: bool,
                  batch: bool) -> QueuedRequest:
    prompt = services.engine.prepare([m.to_chat() for m in body.messages], body.reasoning_effort)
    max_tokens = _max_tokens(services, body, prompt.num_tokens)
    cls, score = _priority(request, body, priority_key, batch, services.config.scheduler)
    params = GenParams(
        max_tokens=max_tokens,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        stop=body.stop_list,
        seed=body.seed,
    )
    request_id = body.request_id or _header_request_id(request) or f"chatcmpl-{uuid.uuid4().hex}"
    return QueuedRequest(request_id=request_id, priority=cls, score=score, prompt=prompt, params=params)


def _priority(request: Request, body: ChatCompletionRequest, priority_key: bool, batch: bool,
              config: SchedulerConfig) -> tuple[PriorityClass, float]:
    given = PriorityInput(request.headers.get("x-priority"), priority_key, body.priority, batch,
                          body.requested_max_tokens, body.temperature)
    try:
        return resolve_priority(given, config)
    except PriorityInputError as exc:
        raise APIError(400, str(exc), param=exc.param, code="invalid_priority") from None


def _header_request_id(request: Request) -> str | None:
    value = request.headers.get("x-request-id")
    if value and not re.fullmatch(REQUEST_ID_PATTERN, value):
        raise APIError(400, f"X-Request-ID must be 1 to 128 letters, digits or . _ : -; got {value[:140]!r}",
                       param="X-Request-ID", code="invalid_value")
    return value or None


def _batch_mode(request: Request) -> bool:
    mode = request.query_params.get("mode")
    if mode not in (None, "batch", "interactive"):
        raise APIError(400, f"mode must be batch or interactive; got {mode!r}", param="mode", code="invalid_value")
    return mode == "batch"


def _check_engine(services: Services, body: ChatCompletionRequest) -> None:
    if not services.engine.ready:
        raise APIError(503, "the model is still loading; retry shortly", code="engine_loading",
                       headers={"Retry-After": "5"})
    model = services.engine.capabilities.model
    if body.model is not None and body.model != model:
        raise APIError(404, f"the model {body.model!r} does not exist; available: {model}", param="model",
                       code="model_not_found")


def _max_tokens(services: Services, body: ChatCompletionRequest, prompt_tokens: int) -> int:
    caps = services.engine.capabilities
    context = caps.max_model_len
    room = context - prompt_tokens
    asked = body.requested_max_tokens
    param = _max_tokens_param(body)
    if asked is not None and asked > context:
        raise APIError(400, f"{param} is {asked}, but the model's context is only {context} tokens", param=param,
                       code="invalid_value")
    if room < 1 or (asked is not None and asked > room):
        raise APIError(
            400,
            f"this model's maximum context length is {context} tokens; the messages take {prompt_tokens} tokens"
            + (f" and {param} asks for {asked} more" if asked is not None else ", leaving no room for an answer"),
            param="messages", code="context_length_exceeded",
        )
    if asked is not None:
        return asked
    return max(1, min(services.config.server.default_max_tokens, room, caps.token_budget - prompt_tokens))


def _max_tokens_param(body: ChatCompletionRequest) -> str:
    return "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"


def _submit_error(exc: SchedulerError, body: ChatCompletionRequest) -> APIError:
    """The scheduler's refusal, naming the parameter this client actually sent."""
    error = APIError.from_scheduler(exc)
    if exc.kind == "too_large":
        error.param = _max_tokens_param(body) if body.requested_max_tokens is not None else "messages"
    return error


def _reasoning_header(services: Services, body: ChatCompletionRequest) -> dict[str, str]:
    """reasoning_effort reaches models whose chat template reads it (gpt-oss); others ignore it."""
    if body.reasoning_effort is None:
        return {}
    applied = services.engine.capabilities.supports_reasoning_effort
    return {"X-Reasoning-Effort": body.reasoning_effort if applied else "ignored"}


def _headers(ticket: Ticket, wait_s: float, extra: dict[str, str]) -> dict[str, str]:
    return {"X-Request-ID": ticket.request_id, "X-Queue-Wait-Ms": f"{wait_s * 1000:.0f}",
            "X-Priority": ticket.request.priority.value, **extra}


async def _stream(services: Services, ticket: Ticket, completion: Completion, include_usage: bool,
                  extra: dict[str, str]) -> Response:
    """Wait briefly for dispatch so most streams carry their exact queue wait in the headers; a
    stream still queued after that opens anyway and reports its place in SSE comments."""
    scheduler = services.scheduler
    try:
        first = await ticket.next_event(timeout=NOTICE_INTERVAL_S)
    except asyncio.CancelledError:
        scheduler.cancel(ticket.request_id)
        raise
    if isinstance(first, SchedulerError):
        raise APIError.from_scheduler(first)
    wait = first.queue_wait_s if isinstance(first, Dispatched) else scheduler.clock() - ticket.request.arrival
    return TicketStream(
        ticket_events(scheduler, ticket, completion, first, include_usage),
        on_close=lambda: _release(scheduler, ticket),
        headers=_headers(ticket, wait, extra),
    )


async def _complete(request: Request, services: Services, ticket: Ticket, completion: Completion,
                    extra: dict[str, str]) -> Response:
    collect = asyncio.ensure_future(_collect(ticket, completion))
    gone = asyncio.ensure_future(_client_gone(request))
    try:
        await asyncio.wait({collect, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not collect.done():
            collect.cancel()
        _release(services.scheduler, ticket)
    if not collect.done() or collect.cancelled():
        return Response(status_code=499)
    try:
        wait = collect.result()
    except APIError as exc:
        exc.headers.update(_headers(ticket, scheduler_wait(ticket), extra))
        raise
    return JSONResponse(completion.body(), headers=_headers(ticket, wait, extra))


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


def _release(scheduler, ticket: Ticket) -> None:  # noqa: ANN001
    ticket.close()
    scheduler.cancel(ticket.request_id)
