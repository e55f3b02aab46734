"""The caller of an HTTP request, from `Authorization: Bearer KEY` or `?token=KEY`."""

from __future__ import annotations

from fastapi import Request

from pipeline.caller import Caller, Keyring


def identify(request: Request) -> Caller:
    keyring: Keyring = request.app.state.services.keyring
    return keyring.identify(_bearer(request.headers.get("authorization")), request.query_params.get("token"))


def _bearer(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, credential = value.partition(" ")
    return credential.strip() or None if scheme.lower() == "bearer" else None
