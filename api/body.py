"""A request body: JSON (by Content-Type too), within the depth and size bounds, validated by its
model, with each failure as an OpenAI-format 4xx and at most one log line."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from api.deps import services_of
from api.errors import APIError
from protocols.json_bounds import SCHEMA_PLACES, BoundError, JsonBounds, found
from protocols.openai_chat.request import describe
from protocols.openai_chat.tools import schema_problem
from protocols.unicode_text import ESCAPED_SURROGATE, lone_surrogate_at

Body = TypeVar("Body", bound=BaseModel)
log = logging.getLogger("gpt_oss_webui.api")
_OFF_LOOP_SCHEMA_BYTES = 8192  # a schema this large takes jsonschema over a millisecond to check


async def read_object(request: Request) -> dict:
    """The JSON object a POST carries, its schemas already checked (off the event loop when large)."""
    check_json(request)
    data = load_object(await request.body())
    await within_bounds(request, data)
    return data


async def within_bounds(request: Request, data: dict) -> None:
    server = services_of(request).config.server
    try:
        schema_bytes = JsonBounds(server.max_json_depth, server.max_schema_bytes).check(data)
    except BoundError as exc:
        log.info("refused %s %s: %s", request.method, request.url.path, exc)
        raise APIError(400, str(exc), param=exc.param, code="invalid_value") from None
    if schema_bytes > _OFF_LOOP_SCHEMA_BYTES:  # checked in a thread, so the model's validators find it known
        texts = [json.dumps(schema, sort_keys=True) for _, schema in found(data, SCHEMA_PLACES)]
        await asyncio.to_thread(lambda: [schema_problem(text) for text in texts])


def check_json(request: Request) -> None:
    """A browser sends a cross-site POST of `text/plain`, or of a Blob with no type at all, without
    asking first (no CORS preflight); refusing all but JSON keeps other sites' pages from using the
    server through a visitor's browser."""
    kind = request.headers.get("content-type")
    if kind is None or kind.split(";")[0].strip().lower() != "application/json":
        got = "none" if kind is None else repr(kind[:100])
        raise APIError(
            415,
            f"Content-Type must be application/json; got {got}",
            param="Content-Type",
            code="unsupported_media_type",
        )


def load_object(raw: bytes) -> dict:
    try:
        data = json.loads(raw)
    except ValueError as exc:  # also bad UTF-8 and integers over Python's digit limit
        raise APIError(400, f"request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:
        raise APIError(400, "request body is not valid JSON: nested too deeply", code="invalid_json") from None
    if not isinstance(data, dict):
        raise APIError(400, "request body must be a JSON object", code="invalid_json")
    if ESCAPED_SURROGATE.search(raw):
        _check_unicode(data)
    return data


def _check_unicode(data: dict) -> None:
    """Refused where it is (`messages.0.content`), before anything runs."""
    where = lone_surrogate_at(data)
    if where is not None:
        raise APIError(
            400,
            f"invalid value for {where or 'a field name'}: text must be valid Unicode, without lone surrogates",
            param=where or None,
            code="invalid_value",
        )


def validate(data: dict, model: type[Body]) -> Body:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        param, message = describe(exc)
        code = "unsupported_parameter" if message.startswith("unrecognized") else "invalid_value"
        raise APIError(400, message, param=param, code=code) from None
