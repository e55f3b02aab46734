"""A request body: JSON, validated by its model, with each failure as an OpenAI-format 400."""

from __future__ import annotations

import json
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from api.errors import APIError
from pipeline.params import describe

Body = TypeVar("Body", bound=BaseModel)


def parse_json(raw: bytes, model: type[Body]) -> Body:
    return validate(load_object(raw), model)


def load_object(raw: bytes) -> dict:
    try:
        data = json.loads(raw)
    except ValueError as exc:  # also bad UTF-8 and integers over Python's digit limit
        raise APIError(400, f"request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:
        raise APIError(400, "request body is not valid JSON: nested too deeply", code="invalid_json") from None
    if not isinstance(data, dict):
        raise APIError(400, "request body must be a JSON object", code="invalid_json")
    return data


def validate(data: dict, model: type[Body]) -> Body:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        param, message = describe(exc)
        code = "unsupported_parameter" if message.startswith("unrecognized") else "invalid_value"
        raise APIError(400, message, param=param, code=code) from None
