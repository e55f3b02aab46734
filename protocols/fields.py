"""The first field of a request body an API does not take, and why: one it names as unsupported
(with its own reason), or one its model does not declare. Every wire refuses these by name."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

UNRECOGNIZED = "unrecognized request argument supplied: {name}"  # OpenAI's wording


def unknown_field(
    data: dict[str, Any], model: type[BaseModel], unsupported: dict[str, str], wording: str = UNRECOGNIZED
) -> tuple[str, str] | None:
    for name in data:
        if name in unsupported:
            return name, unsupported[name]
        if name not in model.model_fields:
            return name, wording.format(name=name)
    return None
