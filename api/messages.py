"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API on the same pipeline
as chat and responses (the caller's key, class, fair share, the door, limits, the cache, usage,
queue notices, abort on disconnect), its errors in Anthropic's shape (api/errors.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import ValidationError

from api.auth import identify
from api.body import read_object, validate
from api.deps import services_of
from api.errors import APIError
from api.relay import complete_response, rendered, stream_response, unless_client_leaves
from pipeline.caller import Caller
from pipeline.chat import ChatCall, ChatRun, PriorityHints
from pipeline.events import Event
from pipeline.prepare import check_model, check_ready
from protocols.anthropic_messages.render import MessageShape, MessageStream, ratelimit_headers
from protocols.anthropic_messages.request import (
    MessagesRequest,
    RedactedThinkingBlock,
    ThinkingBlock,
    ToolRefused,
    ToolResultBlock,
    ToolUseBlock,
    client_tools,
    refused_block,
    unknown_request_field,
)
from protocols.anthropic_messages.to_chat import chat_request
from protocols.openai_chat.request import ChatCompletionRequest, describe
from protocols.openai_chat.tools import ToolParamError, check_tools
from responses.sealed import ReasoningSeal, SealError

router = APIRouter()


@router.post("/v1/messages")
async def create_message(request: Request) -> Response:
    services = services_of(request)
    caller = identify(request)
    body, chat = await _parse(request, caller)
    seal = services.reasoning_seal
    shape = MessageShape(
        services.engine.capabilities.model,
        lambda text: seal.seal(text, caller.name),
        show_thinking=body.thinking is None or body.thinking.display != "omitted",
    )
    call = ChatCall(
        caller=caller,
        params=chat,
        hints=PriorityHints(request.headers.get("x-priority")),
        request_id=body.request_id or shape.id,
        cache_control=request.headers.get("cache-control", ""),
        streamed=body.stream,
    )
    run = await unless_client_leaves(request, services.pipeline.start(call))
    if run is None:
        return Response(status_code=499)
    headers = {"request-id": shape.id, **ratelimit_headers({k.lower(): v for k, v in run.rate_headers.items()})}
    if body.stream:
        return await stream_response(
            run, lambda first, events: _stream(run, shape, first, events), headers, request.url.path
        )
    return await complete_response(request, run, shape.message, headers)


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request) -> dict:
    """The prompt as the model would take it (template, tools and all): what `usage.input_tokens`
    plus `cache_read_input_tokens` of the same request come to."""
    services = services_of(request)
    caller = identify(request)
    data = await read_object(request)
    data.setdefault("max_tokens", 1)
    _, chat = await _checked(data, caller, services.reasoning_seal)
    check_model(services.engine, chat.model)
    check_ready(services.engine)
    services.pipeline.limiter.admit_count(caller)
    use = chat.tool_use()
    prompt = await services.engine.prepare(
        [m.to_chat() for m in chat.messages], chat.reasoning_effort, use.tools if use else (), chat.chat_template_kwargs
    )
    return {"input_tokens": prompt.num_tokens}


async def _stream(run: ChatRun, shape: MessageShape, first: Event, events: AsyncIterator[Event]) -> AsyncIterator[str]:
    writer = MessageStream(shape, run.prompt_tokens)
    for line in writer.begin():
        yield line
    async for line in rendered(first, events, writer):
        yield line


async def _parse(request: Request, caller: Caller) -> tuple[MessagesRequest, ChatCompletionRequest]:
    data = await read_object(request)
    return await _checked(data, caller, services_of(request).reasoning_seal)


async def _checked(data: dict, caller: Caller, seal: ReasoningSeal) -> tuple[MessagesRequest, ChatCompletionRequest]:
    for found in (unknown_request_field(data), refused_block(data)):
        if found is not None:
            raise APIError(400, found[1], param=found[0], code="invalid_value")
    body = validate(data, MessagesRequest)
    _check_turns(body)
    try:
        tools = client_tools(body.tools)
        chat = chat_request(body, tools, lambda token: _unsealed(seal, token, caller))
        check_tools(chat.tools, chat.tool_choice)
    except ToolRefused as exc:
        raise APIError(400, str(exc), param=exc.param, code="invalid_value") from None
    except ToolParamError as exc:
        raise APIError(
            400, str(exc), param="tool_choice" if exc.param == "tool_choice" else "tools", code="invalid_value"
        ) from None
    except ValidationError as exc:
        param, message = describe(exc)
        raise APIError(400, message, param=param, code="invalid_value") from None
    return body, chat


def _unsealed(seal: ReasoningSeal, token: str, caller: Caller) -> str:
    try:
        return seal.open(token, caller.name)
    except SealError:
        raise APIError(
            400,
            "a thinking block's signature is not one this server gave this caller",
            param="messages",
            code="invalid_value",
        ) from None


_NOT_FROM = {"user": (ThinkingBlock, RedactedThinkingBlock, ToolUseBlock), "assistant": (ToolResultBlock,)}


def _check_turns(body: MessagesRequest) -> None:
    """Blocks only the other side writes are refused, not dropped (a thinking block's signature is
    checked where it belongs); a required call needs tools to call."""
    for i, message in enumerate(body.messages):
        for j, block in enumerate(message.blocks):
            if isinstance(block, _NOT_FROM[message.role]):
                raise APIError(
                    400,
                    f"a {message.role} message cannot hold a {block.type} block",
                    param=f"messages.{i}.content.{j}",
                    code="invalid_value",
                )
    choice = body.tool_choice
    if choice is not None and choice.type in ("any", "tool") and not body.tools:
        raise APIError(400, f"tool_choice {choice.type!r} needs tools", param="tool_choice", code="invalid_value")
