"""API keys: who may call, and whose key makes a request high priority."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from api.errors import APIError
from settings.schema import Config


@dataclass(slots=True, frozen=True)
class Caller:
    key: str | None
    priority_key: bool
    admin: bool


def identify(request: Request, config: Config) -> Caller:
    """Keys come as `Authorization: Bearer KEY` or `?token=KEY`.

    With `server.api_keys` set, every call needs a known key. Without it the service is open and
    any bearer key is accepted (the openai client always sends one), but a `?token=` that is not a
    priority key is refused: the caller asked for priority with a key we do not know.
    """
    bearer = _bearer(request.headers.get("authorization"))
    token = request.query_params.get("token")
    key = token or bearer
    priority_keys = set(config.scheduler.priority_keys)
    admin_keys = set(config.server.admin_keys)
    known = set(config.server.api_keys) | priority_keys | admin_keys
    if config.server.api_keys and key not in known:
        raise APIError(401, "invalid or missing API key", code="invalid_api_key")
    if token is not None and token not in known:
        raise APIError(401, "invalid token: not a known API key", param="token", code="invalid_api_key")
    return Caller(key=key, priority_key=key in priority_keys, admin=key in admin_keys)


def _bearer(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, credential = value.partition(" ")
    return credential.strip() or None if scheme.lower() == "bearer" else None
