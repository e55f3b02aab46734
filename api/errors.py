"""Every failure leaves the server as an error object of its API (OpenAI's, Anthropic's, Ollama's)
with the right status, never a trace."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from api.deps import services_of
from pipeline.refusal import Refusal
from protocols.anthropic_messages import render as anthropic
from protocols.ollama import render as ollama
from protocols.openai_chat.render import error_body

log = logging.getLogger("gpt_oss_webui.api")


class APIError(Refusal):
    """A refusal only HTTP can make (a bad body, a wrong method)."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(status, message, param=param, code=code, headers=headers)


ANTHROPIC_PATHS = "/v1/messages"  # Anthropic's Messages API answers its errors in Anthropic's shape
OLLAMA_PATHS = "/api/"  # Ollama's API, in Ollama's: {"error": "..."}


def error_response(refusal: Refusal, headers: dict[str, str] | None = None, path: str = "") -> JSONResponse:
    """The refusal in the shape of the API `path` belongs to: OpenAI's everywhere but the Messages
    API, whose clients read Anthropic's (and retry its 529 for capacity), and Ollama's API."""
    extra = dict(refusal.headers)
    if refusal.retry_after_s is not None:
        extra["Retry-After"] = str(refusal.retry_after_s)
    if path.startswith(ANTHROPIC_PATHS):
        limits = anthropic.ratelimit_headers({k.lower(): v for k, v in extra.items()})
        return JSONResponse(
            anthropic.error_body(refusal),
            status_code=anthropic.status_of(refusal),
            headers={**extra, **limits, **(headers or {})},
        )
    body = ollama.error_body(refusal) if path.startswith(OLLAMA_PATHS) else error_body(refusal)
    return JSONResponse(body, status_code=refusal.status, headers={**extra, **(headers or {})})


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(Refusal)
    async def _refusal(request: Request, exc: Refusal) -> JSONResponse:
        return error_response(exc, path=request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = "not_found" if exc.status_code == 404 else None
        return error_response(APIError(exc.status_code, str(exc.detail), code=code), path=request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        return error_response(
            APIError(400, f"{param}: {first.get('msg', 'invalid value')}", param=param), path=request.url.path
        )

    @app.exception_handler(ClientDisconnect)
    async def _client_left(request: Request, _: ClientDisconnect) -> Response:
        """The client left while sending its body: nobody is there to answer; count it, quietly."""
        services_of(request).pipeline.abandoned["body"] += 1
        log.debug("client left while sending its body: %s %s", request.method, request.url.path)
        return Response(status_code=499)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return error_response(APIError(500, "internal server error", code="internal_error"), path=request.url.path)
