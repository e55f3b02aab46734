"""POST /v1/completions: OpenAI's legacy text completions on the same pipeline as chat (keys,
class, fair share, the door, limits, the cache, usage, queue notices, abort on disconnect), so
the tools that only send a prompt to continue (evaluation harnesses, older SDK code, LangChain's
`OpenAI` LLM) queue with everyone else instead of going to the engine around us."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from api.auth import identify
from api.body import read_object, validate
from api.chat import http_call
from api.deps import services_of
from api.errors import APIError
from api.relay import complete_response, rendered, stream_response, unless_client_leaves
from protocols.openai_completions.render import TextCompletionFormat, TextCompletionStream
from protocols.openai_completions.request import DEFAULT_MAX_TOKENS, CompletionRequest, unknown_fields


async def create_completion(request: Request) -> Response:
    services = services_of(request)
    caller = identify(request)
    body = parse_body(await read_object(request))
    call = http_call(request, caller, body)
    run = await unless_client_leaves(request, services.pipeline.start(call))
    if run is None:
        return Response(status_code=499)
    fmt = TextCompletionFormat.start(run.request_id, services.engine.capabilities.model, body.prompt_text * body.echo)
    if call.streamed:
        stream = TextCompletionStream(fmt, body.include_usage)
        return await stream_response(run, lambda first, events: rendered(first, events, stream))
    return await complete_response(request, run, fmt.body)


def parse_body(data: dict, openai_default: bool = True) -> CompletionRequest:
    """`openai_default`: `max_tokens` left out is 16, as on OpenAI and vLLM (Ollama's raw generate
    has its own default, the server's)."""
    if (unknown := unknown_fields(data)) is not None:
        raise APIError(400, unknown[1], param=unknown[0], code="unsupported_parameter")
    if openai_default and data.get("max_tokens") is None:
        data = {**data, "max_tokens": DEFAULT_MAX_TOKENS}
    body = validate(data, CompletionRequest)
    if (problem := body.problem()) is not None:
        param, code, message = problem
        raise APIError(400, message, param=param, code=code)
    return body
