"""POST /v1/chat/completions: validate, hand to the scheduler, relay its answer."""

from __future__ import annotations

import json
import re
import uuid

from fastapi import Request
from fastapi.responses import Response
from pydantic import ValidationError

from api.auth import identify
from api.errors import APIError
from api.openai_format import Completion
from api.schemas import REQUEST_ID_PATTERN, ChatCompletionRequest, describe
from api.cached import lookup, plan_cache, replay, write_back
from api.relay import complete_ticket, stream_ticket
from api.services import Services
from engine.base import GenParams, Prompt
from scheduler.priority import PriorityInput, PriorityInputError, resolve_priority
from scheduler.request import PriorityClass, Request as QueuedRequest, SchedulerError, Ticket
from settings.schema import SchedulerConfig


async def create_chat_completion(request: Request) -> Response:
    services: Services = request.app.state.services
    caller = identify(request, services.config)
    body = parse_body(await request.body())
    batch = _batch_mode(request)
    _check_model(services, body)
    cls, score = _priority(request, body, caller.priority_key, batch, services.config.scheduler)
    request_id = body.request_id or _header_request_id(request) or f"chatcmpl-{uuid.uuid4().hex}"
    stream = body.stream and not batch
    extra = _reasoning_header(services, body)
    plan = plan_cache(services, body, caller.key, request.headers.get("cache-control", ""))
    completion = Completion.start(request_id, services.engine.capabilities.model, 0)
    hit = await lookup(services, plan)
    if hit is not None:
        headers = {"X-Request-ID": request_id, "X-Queue-Wait-Ms": "0", "X-Priority": cls.value, "X-Cache": "HIT"}
        return replay(hit, completion, stream, body.include_usage, {**headers, **extra})
    completion.on_finish, after = write_back(services, plan)
    try:
        ticket = _submit(services, body, QueuedRequest(request_id, cls, score, *prepare_generation(services, body)))
    except BaseException:
        after()
        raise
    completion.prompt_tokens = ticket.request.prompt.num_tokens
    extra["X-Cache"] = plan.status
    if stream:
        return await stream_ticket(services.scheduler, ticket, completion, body.include_usage, extra, after)
    return await complete_ticket(request, services.scheduler, ticket, completion, extra, after)


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


def prepare_generation(services: Services, body: ChatCompletionRequest) -> tuple[Prompt, GenParams]:
    """The engine's prompt (exact token count) and the sampling parameters."""
    if not services.engine.ready:
        raise APIError(503, "the model is still loading; retry shortly", code="engine_loading",
                       headers={"Retry-After": "5"})
    prompt = services.engine.prepare([m.to_chat() for m in body.messages], body.reasoning_effort)
    max_tokens = _max_tokens(services, body, prompt.num_tokens)
    params = GenParams(
        max_tokens=max_tokens,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        stop=body.stop_list,
        seed=body.seed,
    )
    return prompt, params


def _submit(services: Services, body: ChatCompletionRequest, queued: QueuedRequest) -> Ticket:
    try:
        return services.scheduler.submit(queued)
    except SchedulerError as exc:
        raise _submit_error(exc, body) from None


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


def _check_model(services: Services, body: ChatCompletionRequest) -> None:
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
