"""The caller of an HTTP request, from `Authorization: Bearer KEY`, `x-api-key: KEY` (Anthropic's
clients) or `?token=KEY`."""

from __future__ import annotations

from fastapi import Request

from api.deps import services_of
from pipeline.caller import Caller


def identify(request: Request) -> Caller:
    given = _bearer(request.headers.get("authorization")) or request.headers.get("x-api-key") or None
    return services_of(request).keyring.identify(given, request.query_params.get("token"))


def _bearer(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, credential = value.partition(" ")
    return credential.strip() or None if scheme.lower() == "bearer" else None
