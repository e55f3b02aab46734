"""Ollama's API (`/api/chat`, `/api/generate`, `/api/tags`, `/api/show`, `/api/ps`,
`/api/version`) on the same pipeline as every other wire (the caller's key, class, fair share, the
door, limits, the cache, usage, queue notices, abort on disconnect), so the many clients that only
speak Ollama's API queue with everyone else instead of going to the engine around us. Errors are
Ollama's `{"error": ...}` (api/errors.py). Model management (pull, create, delete...) is the
operator's: a 501."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import UTC, datetime

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from api.auth import identify
from api.body import read_object, validate
from api.chat import header_request_id, parse_body
from api.completions import parse_body as parse_text
from api.deps import services_of
from api.errors import APIError
from api.relay import complete_response, rendered, stream_response, unless_client_leaves
from pipeline.chat import ChatCall, PriorityHints
from pipeline.prepare import AnswerBound, check_model, check_ready
from pipeline.refusal import Refusal
from protocols.ollama.render import AnswerShape, AnswerStream, created_at
from protocols.ollama.request import ChatRequest, GenerateRequest, Options, ShowRequest, unknown_request_field, unloads
from protocols.ollama.to_chat import Untranslatable, chat_fields, served_name, text_fields
from protocols.openai_chat.request import ChatCompletionRequest
from protocols.openai_completions.request import CompletionRequest
from wiring import Services

router = APIRouter()
VERSION = "0.12.0"  # the Ollama API this follows, as clients that check `/api/version` read it
_STARTED = datetime.now(UTC).isoformat().replace("+00:00", "Z")
MANAGED = ("pull", "push", "create", "copy", "delete", "embed", "embeddings", "blobs/{digest}")


@router.post("/api/chat")
async def chat(request: Request) -> Response:
    return await _answer(request, ChatRequest)


@router.post("/api/generate")
async def generate(request: Request) -> Response:
    return await _answer(request, GenerateRequest)


async def _answer(request: Request, model: type[ChatRequest] | type[GenerateRequest]) -> Response:
    services = services_of(request)
    caller = identify(request)
    data = await read_object(request)
    body = _parsed(data, model)
    if unloads(body.keep_alive):
        raise APIError(400, "the model is shared by everyone on this server; it is not unloaded", param="keep_alive")
    caps = services.engine.capabilities
    if not (body.messages if isinstance(body, ChatRequest) else body.prompt):
        return _loaded(body, services)
    if len(await request.body()) > _OFF_LOOP_BYTES:  # validated twice, as Ollama's then as chat's
        chat, bound = await asyncio.to_thread(_chat_request, body, caps.model, caps.max_model_len)
    else:
        chat, bound = _chat_request(body, caps.model, caps.max_model_len)
    # made before the start, so its total_duration counts the wait for it too
    shape = AnswerShape(body.model, chat=isinstance(body, ChatRequest), show_thinking=body.think is not False)
    call = ChatCall(
        caller=caller,
        params=chat,
        hints=PriorityHints(request.headers.get("x-priority")),
        request_id=header_request_id(request),
        cache_control=request.headers.get("cache-control", ""),
        streamed=body.stream,
        bound=bound,
    )
    try:
        run = await unless_client_leaves(request, services.pipeline.start(call))
    except Refusal as exc:
        raise _in_ollamas_names(exc, isinstance(body, GenerateRequest)) from None
    if run is None:
        return Response(status_code=499)
    if body.stream:
        return await stream_response(
            run,
            lambda first, events: rendered(first, events, AnswerStream(shape)),
            path=request.url.path,
            media_type="application/x-ndjson",
        )
    return await complete_response(request, run, shape.whole)


def _parsed(data: dict, model: type[ChatRequest] | type[GenerateRequest]) -> ChatRequest | GenerateRequest:
    if (found := unknown_request_field(data, model)) is not None:
        raise APIError(400, found[1], param=found[0], code="unsupported_parameter")
    return validate(data, model)


def _chat_request(
    body: ChatRequest | GenerateRequest, served: str, context: int
) -> tuple[ChatCompletionRequest | CompletionRequest, AnswerBound]:
    """The chat request (a text completion's, with `raw: true`) and how far its answer may go. A
    `num_ctx` under the model's context bounds the answer by the prompt, which the key of a cached
    answer does not hold: no cache then."""
    raw = isinstance(body, GenerateRequest) and body.raw
    try:
        fields = text_fields(body, served) if isinstance(body, GenerateRequest) and raw else chat_fields(body, served)
    except Untranslatable as exc:
        raise APIError(400, str(exc), param=exc.param, code="invalid_value") from None
    options = body.options or Options()
    if options.num_ctx is not None and options.num_ctx < context:
        fields["cache"] = False
    bound = AnswerBound(options.num_ctx, fields.get("max_tokens"), fill=options.num_predict in (-1, -2))
    try:
        return (parse_text(fields, openai_default=False) if raw else parse_body(fields)), bound
    except APIError as exc:
        raise _in_ollamas_names(exc, isinstance(body, GenerateRequest)) from None


_OFF_LOOP_BYTES = 65_536  # a body this large takes the event loop milliseconds to validate
_NAMES = {
    "response_format": "format",
    "max_tokens": "options.num_predict",
    "repetition_penalty": "options.repeat_penalty",
}


def _in_ollamas_names(exc: Refusal, generate: bool) -> Refusal:
    """A refusal of the chat request, naming the Ollama field it came from (`/api/generate`'s
    messages are its `prompt`)."""
    param = exc.param or ""
    head = param.split(".")[0]
    names = {**_NAMES, "messages": "prompt"} if generate else _NAMES
    if head not in names:
        return exc
    named = names[head] if head in ("response_format", "messages") else names[head] + param[len(head) :]
    message = exc.message.replace(param, named) if head != "messages" else exc.message
    return Refusal(exc.status, message, named, exc.code, exc.retry_after_s, exc.headers)


def _loaded(body: ChatRequest | GenerateRequest, services: Services) -> JSONResponse:
    """No prompt: Ollama's way to load a model, answered once the served model is ready (its
    unload, `keep_alive: 0`, is refused: the model is everyone's)."""
    check_model(services.engine, served_name(body.model))
    check_ready(services.engine)
    reply = {"model": body.model, "created_at": created_at(), "done": True, "done_reason": "load"}
    if isinstance(body, ChatRequest):
        return JSONResponse({**reply, "message": {"role": "assistant", "content": ""}})
    return JSONResponse({**reply, "response": ""})


@router.get("/api/tags")
async def tags(request: Request) -> dict:
    services = services_of(request)
    identify(request)
    return {"models": [_model_entry(services.engine.capabilities.model)]}


@router.get("/api/ps")
async def running(request: Request) -> dict:
    services = services_of(request)
    identify(request)
    caps = services.engine.capabilities
    entry = {**_model_entry(caps.model), "expires_at": "9999-12-31T23:59:59Z", "size_vram": 0}
    return {"models": [{**entry, "context_length": caps.max_model_len}] if services.engine.ready else []}


@router.post("/api/show")
async def show(request: Request) -> dict:
    services = services_of(request)
    identify(request)
    asked = validate(await read_object(request), ShowRequest)
    name = asked.model or asked.name
    if name is None:
        raise APIError(400, "model is required", param="model")
    caps = services.engine.capabilities
    check_model(services.engine, served_name(name))
    capabilities = ["completion"]
    if caps.tool_format is not None:
        capabilities.append("tools")
    if caps.supports_reasoning_effort:
        capabilities.append("thinking")
    return {
        "modelfile": "",
        "parameters": "",
        "template": "",
        "details": _details(),
        "model_info": {"general.architecture": "", "context_length": caps.max_model_len},
        "capabilities": capabilities,
        "modified_at": _STARTED,
    }


@router.get("/api/version")
async def version(request: Request) -> dict:
    identify(request)
    return {"version": VERSION}


def _model_entry(model: str) -> dict:
    name = f"{model}:latest"
    return {
        "name": name,
        "model": name,
        "modified_at": _STARTED,
        "size": 0,
        "digest": hashlib.sha256(model.encode()).hexdigest(),
        "details": _details(),
    }


def _details() -> dict:
    """What the engine does not tell (format, family, size, quantization) is left empty."""
    return {
        "parent_model": "",
        "format": "",
        "family": "",
        "families": [],
        "parameter_size": "",
        "quantization_level": "",
    }


async def _managed(request: Request) -> Response:
    identify(request)
    raise APIError(501, "models are set by this server's operator; this endpoint is not served", code="not_supported")


for _path, _answering in (("tags", tags), ("version", version)):  # HEAD as Ollama answers it, one operation each
    router.add_api_route(f"/api/{_path}", _answering, methods=["HEAD"], include_in_schema=False)
for _path in MANAGED:
    router.add_api_route(f"/api/{_path}", _managed, methods=["POST", "DELETE", "HEAD", "GET"], include_in_schema=False)
