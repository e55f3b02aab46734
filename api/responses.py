"""The Responses API: `POST /v1/responses` on the chat pipeline, and the stored responses
(`GET` / `DELETE /v1/responses/{id}`, `GET /v1/responses/{id}/input_items`), each caller's own."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from api.auth import identify
from api.body import read_object, validate
from api.deps import background_of, services_of
from api.errors import APIError
from api.relay import complete_response, rendered, run_headers, stream_response, unless_client_leaves
from pipeline.caller import Caller
from pipeline.chat import ChatCall, PriorityHints
from pipeline.events import Event, Finished
from protocols.openai_chat.request import ChatCompletionRequest, describe
from protocols.openai_chat.tools import ToolParamError, check_tools
from protocols.openai_responses.render import EventWriter, ResponseShape, listed, new_id
from protocols.openai_responses.request import (
    Item,
    ReasoningItem,
    ResponsesInputError,
    ResponsesRequest,
    TextContent,
    check_include,
    input_items,
    parse_item,
    split_tools,
    unknown_request_field,
)
from protocols.openai_responses.to_chat import chat_request
from responses.sealed import ReasoningSeal, SealError
from responses.store import ChainBroken, ChainedStore, StoredResponse
from wiring import Services

log = logging.getLogger("gpt_oss_webui.api")
router = APIRouter()


@router.post("/v1/responses")
async def create_response(request: Request) -> Response:
    services = services_of(request)
    caller = identify(request)
    body, items, shape, hosted = parse_request(await read_object(request), services.engine.capabilities.model)
    if hosted:
        log.info(
            "responses: tools this server cannot run were not shown to the model: caller=%s tools=%s",
            caller.name,
            ",".join(hosted),
        )
    chat = await chat_of(services, caller, body, items, shape)
    hints = PriorityHints(request.headers.get("x-priority"), background=body.background)
    call = ChatCall(
        caller=caller,
        params=chat,
        hints=hints,
        request_id=shape.id,
        cache_control=request.headers.get("cache-control", ""),
        streamed=body.stream,
    )
    headers = {"X-Unsupported-Tools": ", ".join(hosted)} if hosted else {}
    run = await unless_client_leaves(request, services.pipeline.start(call))
    if run is None:
        return Response(status_code=499)
    keep = Keeper(services.responses, caller, body, items)
    if body.background:
        queued = shape.envelope("queued", [])
        await keep(queued)
        background_of(request).start(run, shape, lambda state: services.responses.update(shape.id, caller.name, state))
        return JSONResponse(queued, headers={**run_headers(run, 0.0), **headers})
    if body.stream:
        return await stream_response(run, lambda first, events: _stream(first, events, shape, keep), headers)

    async def rendered(finished: Finished) -> dict:
        response = shape.finished(finished, shape.output_items(finished))
        await keep(response)
        return response

    return await complete_response(request, run, rendered, headers)


@router.get("/v1/responses/{response_id}")
async def get_response(request: Request, response_id: str) -> dict:
    return (await _stored(request, response_id)).response


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(request: Request, response_id: str) -> dict:
    stored = await _stored(request, response_id)
    if not stored.response.get("background"):
        raise APIError(400, "only a background response can be cancelled", param="response_id", code="invalid_value")
    if await background_of(request).cancel(response_id):
        stored = await _stored(request, response_id)
    return stored.response


@router.delete("/v1/responses/{response_id}")
async def delete_response(request: Request, response_id: str) -> dict:
    caller = identify(request)
    if not await services_of(request).responses.delete(response_id, caller.name):
        raise _not_found(response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(
    request: Request, response_id: str, limit: int = 20, order: str = "desc", after: str | None = None
) -> dict:
    if not 1 <= limit <= 100 or order not in ("asc", "desc"):
        raise APIError(
            400,
            "limit must be 1 to 100 and order asc or desc",
            param="limit" if order in ("asc", "desc") else "order",
            code="invalid_value",
        )
    stored = await _stored(request, response_id)
    items = [listed(item, f"item_{response_id[5:]}_{i}") for i, item in enumerate(stored.input_items)]
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [item["id"] for item in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }


Parsed = tuple[
    ResponsesRequest, list[Item], ResponseShape, list[str]
]  # the body, its items, the answer's shape, hosted tools


def parse_request(data: dict, model: str) -> Parsed:
    """A Responses body checked as `POST /v1/responses` checks it (a batch line too); APIError names the problem."""
    if (unknown := unknown_request_field(data)) is not None:
        raise APIError(400, unknown[1], param=unknown[0], code="unsupported_parameter")
    body = validate(data, ResponsesRequest)
    if body.input == [] or body.input == "":
        raise APIError(400, "input must not be empty", param="input", code="invalid_value")
    if body.background and (body.stream or not body.store):
        raise APIError(
            400,
            "background needs store: true and no stream: poll GET /v1/responses/{id}",
            param="background",
            code="invalid_value",
        )
    try:
        items = input_items(body)
        tools, custom, hosted = split_tools(body)
        check_include(body)
    except ResponsesInputError as exc:
        raise APIError(400, str(exc), param=exc.param, code=exc.code) from None
    return body, items, ResponseShape(new_id("resp"), model, body, tools, custom), hosted


def checked_chat(data: dict, model: str) -> ChatCompletionRequest:
    """A body checked whole before anything runs (a batch line's): its chain and sealed reasoning
    are read when it runs. Hosted tools are refused here: a live request hears they were not shown
    to the model (X-Unsupported-Tools), a batch line could not."""
    body, items, shape, hosted = parse_request(data, model)
    if hosted:
        raise APIError(
            400, f"tools this server cannot run: {', '.join(hosted)}", param="tools", code="unsupported_parameter"
        )
    return _chat(body, items, shape)


async def chat_of(
    services: Services, caller: Caller, body: ResponsesRequest, items: list[Item], shape: ResponseShape
) -> ChatCompletionRequest:
    """The chat request the response runs as: the stored chain before it, sealed reasoning opened."""
    seal = services.reasoning_seal
    if "reasoning.encrypted_content" in (body.include or ()):
        shape.seal = lambda text: seal.seal(text, caller.name)
    history = await _history(services.responses, body, caller)
    return _chat(body, _unsealed(seal, history + items, caller), shape)


async def _history(store: ChainedStore, body: ResponsesRequest, caller: Caller) -> list[Item]:
    if body.previous_response_id is None:
        return []
    try:
        stored = await store.history(body.previous_response_id, caller.name)
    except KeyError:
        raise APIError(
            404,
            f"no response {body.previous_response_id!r}: it was not stored, has expired, or was deleted",
            param="previous_response_id",
            code="previous_response_not_found",
        ) from None
    except ChainBroken as exc:
        raise APIError(
            404,
            f"response {exc.args[0]!r}, earlier in the chain of {body.previous_response_id!r}, is "
            "gone (deleted, expired or evicted)",
            param="previous_response_id",
            code="previous_response_not_found",
        ) from None
    return [parse_item(item, "previous_response_id") for item in stored]


def _unsealed(seal: ReasoningSeal, items: list[Item], caller: Caller) -> list[Item]:
    """Reasoning passed back sealed is read with the server's key; one that does not open is a 400."""
    out = []
    for i, item in enumerate(items):
        if isinstance(item, ReasoningItem) and item.encrypted_content:
            try:
                text = seal.open(item.encrypted_content, caller.name)
            except SealError as exc:
                raise APIError(
                    400, str(exc), param=f"input.{i}.encrypted_content", code="invalid_encrypted_content"
                ) from None
            item = ReasoningItem(type="reasoning", id=item.id, content=[TextContent(type="reasoning_text", text=text)])
        out.append(item)
    return out


def _chat(body: ResponsesRequest, items: list[Item], shape: ResponseShape) -> ChatCompletionRequest:
    try:
        chat = chat_request(body, items, [*shape.tools, *(t.as_function() for t in shape.custom)])
    except ValidationError as exc:
        param, message = describe(exc)
        raise APIError(400, message, param=param, code="invalid_value") from None
    try:
        check_tools(chat.tools, chat.tool_choice)
    except ToolParamError as exc:
        raise APIError(400, str(exc), param=exc.param, code="invalid_value") from None
    if body.tool_choice not in (None, "none", "auto") and not (shape.tools or shape.custom):
        raise APIError(
            400,
            "tool_choice asks for a call, but there are no function tools",
            param="tool_choice",
            code="invalid_value",
        )
    return chat


class Keeper:
    """Stores a finished response (with `store: true`), the write committed before the client
    hears it completed."""

    def __init__(self, store: ChainedStore, caller: Caller, body: ResponsesRequest, items: list[Item]) -> None:
        self.store, self.caller, self.body = store, caller, body
        self.items = [item.model_dump(exclude_none=True, by_alias=True) for item in items]

    async def __call__(self, response: dict) -> None:
        if self.body.store:
            await self.store.put(
                StoredResponse(
                    response["id"], self.caller.name, time.time(), self.body.previous_response_id, response, self.items
                )
            )


async def _stream(first: Event, events: AsyncIterator[Event], shape: ResponseShape, keep: Keeper) -> AsyncIterator[str]:
    writer = EventWriter(shape, keep)
    for line in writer.begin():
        yield line
    async for line in rendered(first, events, writer):
        yield line


async def _stored(request: Request, response_id: str) -> StoredResponse:
    caller = identify(request)
    stored = await services_of(request).responses.get(response_id, caller.name)
    if stored is None:
        raise _not_found(response_id)
    return stored


def _not_found(response_id: str) -> APIError:
    return APIError(404, f"no response {response_id!r}", param="response_id", code="not_found")
