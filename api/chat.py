"""POST /v1/chat/completions: parse, identify, hand to the pipeline, render its events."""

from __future__ import annotations

import re

from fastapi import Request
from fastapi.responses import Response

from api.auth import identify
from api.body import read_object, validate
from api.deps import services_of
from api.errors import APIError
from api.relay import chat_stream, complete_response, stream_response, unless_client_leaves
from pipeline.caller import Caller
from pipeline.chat import ChatCall, PriorityHints
from protocols.openai_chat.render import CompletionFormat
from protocols.openai_chat.request import (
    REQUEST_ID_PATTERN,
    ChatCompletionRequest,
    template_kwargs_problem,
    unknown_fields,
)
from protocols.openai_chat.tools import ToolParamError, check_tools
from protocols.openai_completions.request import CompletionRequest


async def create_chat_completion(request: Request) -> Response:
    services = services_of(request)
    caller = identify(request)
    body = parse_body(await read_object(request))
    call = http_call(request, caller, body)
    run = await unless_client_leaves(request, services.pipeline.start(call))
    if run is None:
        return Response(status_code=499)
    fmt = CompletionFormat.start(run.request_id, services.engine.capabilities.model, body.include_reasoning)
    if call.streamed:
        return await stream_response(run, chat_stream(fmt, body.include_usage))
    return await complete_response(request, run, fmt.body)


def http_call(request: Request, caller: Caller, body: ChatCompletionRequest | CompletionRequest) -> ChatCall:
    """An OpenAI-wire call: the class from `X-Priority` (`?mode=batch`: low, answered whole), the
    request id from the body or `X-Request-ID`, the cache's directives from `Cache-Control`."""
    batch = batch_mode(request)
    return ChatCall(
        caller=caller,
        params=body,
        hints=PriorityHints(request.headers.get("x-priority"), batch),
        request_id=body.request_id or header_request_id(request),
        cache_control=request.headers.get("cache-control", ""),
        streamed=body.stream and not batch,
    )


def parse_body(data: dict) -> ChatCompletionRequest:
    if (unknown := unknown_fields(data)) is not None:
        raise APIError(400, unknown[1], param=unknown[0], code="unsupported_parameter")
    body = validate(data, ChatCompletionRequest)
    try:
        check_tools(body.tools, body.tool_choice)
    except ToolParamError as exc:
        raise APIError(400, str(exc), param=exc.param, code="invalid_value") from None
    if body.top_logprobs is not None and not body.logprobs:
        raise APIError(400, "top_logprobs needs logprobs: true", param="top_logprobs", code="invalid_value")
    if body.n not in (None, 1):
        raise APIError(400, f"only n=1 is supported; got n={body.n}", param="n", code="invalid_value")
    if len(body.stop_list) > 4:
        raise APIError(400, "stop takes at most 4 sequences", param="stop", code="invalid_value")
    check_template_kwargs(body.chat_template_kwargs)
    if body.min_tokens and body.requested_max_tokens is not None and body.min_tokens > body.requested_max_tokens:
        message = f"min_tokens ({body.min_tokens}) is more than {body.max_tokens_param} ({body.requested_max_tokens})"
        raise APIError(400, message, param="min_tokens", code="invalid_value")
    return body


def check_template_kwargs(kwargs: dict | None) -> None:
    if (param := template_kwargs_problem(kwargs)) is not None:
        message = f"{param} is an argument of the template call, not a template variable"
        raise APIError(400, message, param=param, code="invalid_value")


def header_request_id(request: Request) -> str | None:
    value = request.headers.get("x-request-id")
    if value and not re.fullmatch(REQUEST_ID_PATTERN, value):
        raise APIError(
            400,
            f"X-Request-ID must be 1 to 128 letters, digits or . _ : -; got {value[:140]!r}",
            param="X-Request-ID",
            code="invalid_value",
        )
    return value or None


def batch_mode(request: Request) -> bool:
    mode = request.query_params.get("mode")
    if mode not in (None, "batch", "interactive"):
        raise APIError(400, f"mode must be batch or interactive; got {mode!r}", param="mode", code="invalid_value")
    return mode == "batch"
