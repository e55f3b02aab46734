"""Streamed POSTs to llama.cpp's loopback server, read by an asyncio protocol with httptools (the
parser uvicorn already runs for our own server). Every token is one read of this stream, and on two
cores each microsecond of ours is taken from llama.cpp's compute threads, and httpx's layers
(httpcore, h11, anyio) cost over twice this per token (docs/BENCHMARKS.md has the figures). The
calls that are not streamed stay on httpx. Closing a
stream before its end closes its connection, which is how llama.cpp learns to stop the request; a
stream read to its end leaves the connection for the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any, cast
from urllib.parse import urlsplit

import httptools

IDLE_S = 2.0  # llama.cpp closes a connection idle for 5 s: one older than this is not reused


class StreamError(Exception):
    """The connection failed, or ended before the answer did."""


class SseResponse(asyncio.Protocol):
    """One connection, answering one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.status = 0
        self.keep_alive = False
        self.complete = False
        self.closed = False
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._body = bytearray()
        self._waiter: asyncio.Future[None] | None = None

    def reset(self) -> None:
        """Ready for the next request on this connection."""
        self.status, self.keep_alive, self.complete = 0, False, False
        self._parser = httptools.HttpResponseParser(self)

    @property
    def reusable(self) -> bool:
        return (
            self.complete
            and self.keep_alive
            and not self.closed
            and not self._body
            and time.monotonic() - self.idle_since < IDLE_S
        )

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            self.close()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wake()

    # httptools callbacks

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self.keep_alive = self._parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        self.complete = True
        self.idle_since = time.monotonic()

    # reading

    async def headers(self) -> int:
        while not self.status:
            await self._more()
        return self.status

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives: everything buffered since the last read, in one piece."""
        while True:
            if self._body:
                data = bytes(self._body)
                self._body.clear()
                yield data
            elif self.complete:
                return
            else:
                await self._more()

    async def read(self) -> bytes:
        return b"".join([data async for data in self.chunks()])

    def write(self, data: bytes) -> None:
        if self.transport is None or self.closed:
            raise StreamError("llama.cpp closed the connection")
        self.transport.write(data)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    async def _more(self) -> None:
        if self.closed:
            raise StreamError("llama.cpp closed the connection before the answer's end")
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class SseClient:
    """Keep-alive connections to one loopback server, each reused once its answer was read whole."""

    def __init__(self, base_url: str, headers: dict[str, str]) -> None:
        url = urlsplit(base_url)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        self._head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": url.netloc, **headers}.items())
        self._idle: list[SseResponse] = []

    @contextlib.asynccontextmanager
    async def post(self, path: str, body: dict[str, Any]) -> AsyncIterator[SseResponse]:
        """The response once its headers are in; leaving the block early closes the connection."""
        payload = json.dumps(body, separators=(",", ":")).encode()
        conn = await self._send(
            f"POST {path} HTTP/1.1\r\n{self._head}Content-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        try:
            yield conn
        finally:
            if conn.reusable:
                self._idle.append(conn)
            else:
                conn.close()

    async def aclose(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()

    async def _send(self, request: bytes) -> SseResponse:
        """llama.cpp may close a kept-alive connection as soon as its last answer has ended, before
        we see it closed: a reused connection that ends before any answer is retried once on a new
        one. Nothing was answered on it, and a closed connection stops whatever it had started."""
        while self._idle:
            conn = self._idle.pop()
            if not conn.reusable:
                conn.close()
                continue
            conn.reset()
            try:
                return await _ask(conn, request)
            except StreamError:
                break
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(SseResponse, self.host, self.port)
        except OSError as exc:
            raise StreamError(f"cannot reach llama.cpp's server: {exc}") from None
        return await _ask(conn, request)


async def _ask(conn: SseResponse, request: bytes) -> SseResponse:
    """`conn` once the answer's headers are in; closed if they never come (or we stop waiting)."""
    try:
        conn.write(request)
        await conn.headers()
    except BaseException:
        conn.close()
        raise
    return conn
