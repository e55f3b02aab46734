"""Limits on one HTTP connection that uvicorn does not set: the size of a request's headers (431
past it), the time a client may take to send them, and the time it may take to send its body."""

from __future__ import annotations

import asyncio
import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from api.errors import ANTHROPIC_PATHS, APIError, error_body
from protocols.anthropic_messages import render as anthropic
from settings.schema import ServerConfig

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}
_CODES = {408: "request_timeout", 431: "headers_too_large"}


class BoundedHttpProtocol(HttpToolsProtocol):
    """Set `max_header_bytes`, `header_timeout_s` and `body_timeout_s` on a subclass (`bounded`)."""

    max_header_bytes = 32 * 1024
    header_timeout_s = 10.0
    body_timeout_s = 30.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._refused = False
        self._header_bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm(self.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._refused:
            super().data_received(data)

    def on_message_begin(self) -> None:
        self._header_bytes = 0
        self._url = b""
        self._arm(self.header_timeout_s)
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        if self._count(len(url)):
            self._url += url
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._count(len(name) + len(value) + 4):
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._disarm()
        super().on_headers_complete()
        self._arm(self.body_timeout_s)  # until the body has arrived (at once when there is none)

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._disarm()
        super().on_message_complete()

    def _count(self, size: int) -> bool:
        self._header_bytes += size
        if self._header_bytes > self.max_header_bytes and not self._refused:
            self._refuse(431, f"request headers over {self.max_header_bytes} bytes")
        return not self._refused

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._timer = self.loop.call_later(seconds, self._too_slow)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _too_slow(self) -> None:
        self._timer = None
        if self.cycle is not None and self.cycle.response_started:
            self.transport.close()  # the answer is under way; the client will see the connection end
            return
        self._refuse(408, "the request was not received in time")

    def _refuse(self, status: int, message: str) -> None:
        """Answer once, as an OpenAI error object like every other error, and close: the request
        never reaches the application."""
        self._refused = True
        self._disarm()
        if self.cycle is not None:
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        refusal = APIError(status, message, code=_CODES[status])
        anthropic_path = getattr(self, "_url", b"").startswith(ANTHROPIC_PATHS.encode())
        body = json.dumps(anthropic.error_body(refusal) if anthropic_path else error_body(refusal)).encode()
        head = (
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n" % (status, _REASONS[status], len(body))
        )
        if not self.transport.is_closing():
            self.transport.write(head + body)
            self.transport.close()


def uvicorn_settings(config: ServerConfig) -> dict:
    """uvicorn.Config arguments: this protocol with the configured limits, and the keep-alive.
    uvicorn would trust `X-Forwarded-*` from loopback by default; only `server.forwarded_proto` says
    a proxy is there."""
    protocol = type(
        "ConfiguredHttpProtocol",
        (BoundedHttpProtocol,),
        {
            "max_header_bytes": config.max_header_bytes,
            "header_timeout_s": config.header_timeout_s,
            "body_timeout_s": config.body_timeout_s,
        },
    )
    return {"http": protocol, "timeout_keep_alive": config.keep_alive_s, "proxy_headers": config.forwarded_proto}
