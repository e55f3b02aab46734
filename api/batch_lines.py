"""How one batch line is answered: through the same parse and pipeline as its endpoint
(`POST /v1/chat/completions`, `POST /v1/responses` or `POST /v1/completions`), as its owner, as
background work; and how a line is checked before its batch runs, as that endpoint checks a body."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace

from api import completions, responses
from api.chat import parse_body
from api.relay import collect
from batches.runner import Answer, BatchRunner
from pipeline.caller import Caller
from pipeline.chat import ChatCall, PriorityHints
from pipeline.events import Finished, Refused
from pipeline.refusal import YIELDED, Refusal
from protocols.json_bounds import BoundError, JsonBounds
from protocols.openai_chat.render import CompletionFormat, error_body
from protocols.openai_completions.render import TextCompletionFormat
from wiring import Services

_RETRIED = {429, 503}  # capacity and rate limits: the line waits and tries again
_HINTS = PriorityHints(batch=True, batch_line=True)
Render = Callable[[Finished], Awaitable[dict]]


def build_runner(services: Services) -> BatchRunner:
    config, model = services.config, services.engine.capabilities.model

    def owner(name: str, namespace: str) -> Caller | None:
        caller = services.keyring.by_name(name)
        return replace(caller, cache_namespace=namespace) if caller is not None else None

    async def run(caller: Caller, endpoint: str, data: dict) -> Answer:
        try:
            call, render = await _LINES[endpoint](services, caller, data)
            chat = await services.pipeline.start(call)
        except Refusal as exc:
            return _refused(exc, f"batch-{uuid.uuid4().hex}")
        try:
            last, _ = await collect(chat.events())
        finally:
            chat.release()
        if isinstance(last, Refused):
            return _refused(last.refusal, chat.request_id)
        return Answer(200, await render(last), chat.request_id)

    bounds = JsonBounds(config.server.max_json_depth, config.server.max_schema_bytes)

    def check(endpoint: str, data: dict) -> None:
        """As the endpoint checks its body (run in a thread by the runner)."""
        try:
            bounds.check(data)
            if endpoint == "/v1/responses":
                if data.get("background"):
                    raise ValueError("body.background: a batch request already runs in the background")
                responses.checked_chat(data, model)
            else:
                (completions.parse_body if endpoint == "/v1/completions" else parse_body)(data)
                if data.get("request_id") is not None:  # each line's answer has an id of its own
                    raise ValueError("body.request_id: a batch line is named by its custom_id")
        except BoundError as exc:
            raise ValueError(f"body.{exc.param}: {exc}" if exc.param else f"body: {exc}") from None
        except Refusal as exc:
            message = exc.message[:300]
            raise ValueError(f"body.{exc.param}: {message}" if exc.param else f"body: {message}") from None

    batches = config.batches
    return BatchRunner(
        services.batches,
        run,
        check,
        services.scheduler.background_room,
        owner,
        batches.max_lines,
        config.server.max_body_bytes,
        batches.max_parallel,
    )


async def _chat(services: Services, caller: Caller, data: dict) -> tuple[ChatCall, Render]:
    params = parse_body(data)
    request_id, model = f"batch-{uuid.uuid4().hex}", services.engine.capabilities.model

    async def render(finished: Finished) -> dict:
        return CompletionFormat.start(request_id, model, params.include_reasoning).body(finished)

    return ChatCall(caller=caller, params=params, hints=_HINTS, request_id=request_id), render


async def _text(services: Services, caller: Caller, data: dict) -> tuple[ChatCall, Render]:
    params = completions.parse_body(data)
    request_id, model = f"batch-{uuid.uuid4().hex}", services.engine.capabilities.model

    async def render(finished: Finished) -> dict:
        return TextCompletionFormat.start(request_id, model, params.prompt_text * params.echo).body(finished)

    return ChatCall(caller=caller, params=params, hints=_HINTS, request_id=request_id), render


async def _responses(services: Services, caller: Caller, data: dict) -> tuple[ChatCall, Render]:
    """A response as `POST /v1/responses` makes it, stored (with `store`) for its owner to read and chain."""
    body, items, shape, _ = responses.parse_request(data, services.engine.capabilities.model)
    params = await responses.chat_of(services, caller, body, items, shape)
    keep = responses.Keeper(services.responses, caller, body, items)

    async def render(finished: Finished) -> dict:
        response = shape.finished(finished, shape.output_items(finished))
        await keep(response)
        return response

    return ChatCall(caller=caller, params=params, hints=_HINTS, request_id=shape.id), render


_LINES = {"/v1/chat/completions": _chat, "/v1/responses": _responses, "/v1/completions": _text}


def _refused(refusal: Refusal, request_id: str) -> Answer:
    if refusal.code == YIELDED:
        return Answer(refusal.status, error_body(refusal), request_id, 0.0, yielded=True)
    retry = float(refusal.retry_after_s or 1) if refusal.status in _RETRIED else None
    return Answer(refusal.status, error_body(refusal), request_id, retry)
