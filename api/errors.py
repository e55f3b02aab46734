"""Every failure leaves the server as an OpenAI error object with the right status, never a trace."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from scheduler.request import SchedulerError

log = logging.getLogger("gpt_oss_webui.api")

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "invalid_request_error",
          405: "invalid_request_error", 408: "timeout_error", 413: "invalid_request_error",
          422: "invalid_request_error", 429: "rate_limit_error", 500: "server_error", 503: "server_error"}

# scheduler error kind -> (HTTP status, OpenAI error code)
_SCHEDULER_STATUS = {
    "queue_full": (429, "queue_full"),
    "displaced": (429, "queue_displaced"),
    "queue_timeout": (429, "queue_timeout"),
    "wait_limit": (429, "queue_wait_limit"),
    "too_large": (400, "context_length_exceeded"),
    "duplicate_id": (400, "duplicate_request_id"),
    "shutdown": (503, "server_shutting_down"),
    "disconnect": (499, "client_disconnected"),
    "engine_error": (500, "engine_error"),
}


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": _TYPES.get(self.status, "server_error"),
                          "param": self.param, "code": self.code}}

    def response(self, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers={**self.headers, **(headers or {})})

    @classmethod
    def from_scheduler(cls, error: SchedulerError) -> APIError:
        status, code = _SCHEDULER_STATUS.get(error.kind, (500, error.kind))
        headers = {"Retry-After": str(error.retry_after_s)} if error.retry_after_s is not None else None
        param = "request_id" if error.kind == "duplicate_id" else "max_tokens" if error.kind == "too_large" else None
        return cls(status, error.message, param=param, code=code, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = "not_found" if exc.status_code == 404 else None
        return APIError(exc.status_code, str(exc.detail), code=code).response()

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        return APIError(400, f"{param}: {first.get('msg', 'invalid value')}", param=param).response()

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return APIError(500, "internal server error", code="internal_error").response()
