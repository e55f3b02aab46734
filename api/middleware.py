"""Raw ASGI middleware: a body size limit enforced while reading, and X-Request-ID on every reply."""

from __future__ import annotations

import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import APIError, error_response


class BodyLimitAndRequestId:
    """`uploads`: larger limits by path, for file uploads (Gradio's upload route, `/v1/files`)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, uploads: dict[str, int] | None = None) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.uploads = uploads or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.uploads.get(scope["path"].rstrip("/"), self.max_body_bytes)
        headers = dict(scope["headers"])
        request_id = headers.get(b"x-request-id", b"").decode("latin-1") or f"req-{uuid.uuid4().hex}"
        send = _with_request_id(send, request_id)
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._too_large(send, limit, scope.get("path", ""))
            return
        await self.app(scope, self._limited(receive, limit), send)

    def _limited(self, receive: Receive, limit: int) -> Receive:
        seen = 0

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _error(limit)
            return message

        return limited_receive

    async def _too_large(self, send: Send, limit: int, path: str) -> None:
        response = error_response(_error(limit), {"Connection": "close"}, path)
        await response({"type": "http"}, _no_receive, send)


def _error(limit: int) -> APIError:
    return APIError(413, f"request body is larger than the limit of {limit} bytes", code="request_too_large")


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


def _with_request_id(send: Send, request_id: str) -> Send:
    async def send_with_id(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            if not any(k.lower() == b"x-request-id" for k, _ in headers):
                headers.append((b"x-request-id", request_id.encode("latin-1")))
            message = {**message, "headers": headers}
        await send(message)

    return send_with_id
