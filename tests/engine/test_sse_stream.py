"""The streamed-POST client of the llama.cpp engine against a scripted HTTP/1.1 server: chunked SSE
bodies split anywhere, keep-alive reuse, error bodies, early close, a connection lost mid-answer,
and the deltas read from raw body bytes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

import pytest

from core.types import Delta
from engine.base import EngineError
from engine.openai_wire import sse_body_deltas
from engine.sse_stream import SseClient, StreamError


def sse(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


TOKENS = [sse({"choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}]}) for t in ("a", "b", "c")]
END = (
    sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    + sse({"choices": [], "usage": {"completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 2}}})
    + b"data: [DONE]\n\n"
)
STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class Server:
    """Answers each request with the next scripted reply; records requests and connections."""

    def __init__(self, replies: list[Callable[[asyncio.StreamWriter], AsyncIterator[None]]]) -> None:
        self.replies = replies
        self.requests: list[tuple[str, dict, dict]] = []
        self.connections = 0
        self.closed = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while line := await reader.readline():
                headers = {}
                while (h := await reader.readline()) not in (b"\r\n", b""):
                    k, v = h.decode().split(":", 1)
                    headers[k.lower()] = v.strip()
                body = json.loads(await reader.readexactly(int(headers["content-length"])))
                self.requests.append((line.decode().split()[1], headers, body))
                async for _ in self.replies.pop(0)(writer):
                    await writer.drain()
            self.closed.set()
        except (ConnectionError, asyncio.IncompleteReadError):
            self.closed.set()
        finally:
            writer.close()  # an unclosed writer warns when collected after its loop has closed


async def serving(server: Server) -> tuple[asyncio.AbstractServer, str]:
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    return listener, f"http://127.0.0.1:{port}"


async def whole_stream(writer: asyncio.StreamWriter) -> AsyncIterator[None]:
    writer.write(STREAM_HEAD)
    body = chunked(*TOKENS, END)
    for i in range(0, len(body), 7):  # split anywhere: mid chunk header, mid event
        writer.write(body[i : i + 7])
        yield


async def endless(writer: asyncio.StreamWriter) -> AsyncIterator[None]:
    writer.write(STREAM_HEAD)
    while True:
        writer.write(chunked(TOKENS[0])[:-5])  # one chunk, never the last
        yield
        await asyncio.sleep(0.01)


async def deltas_of(client: SseClient) -> list[Delta]:
    async with client.post("/v1/chat/completions", {"messages": []}) as response:
        assert response.status == 200
        return [d async for d in sse_body_deltas(response.chunks())]


async def test_a_stream_read_whole_leaves_its_connection_for_the_next():
    server = Server([whole_stream, whole_stream])
    listener, url = await serving(server)
    client = SseClient(url, {"Authorization": "Bearer k"})
    for _ in range(2):
        deltas = await deltas_of(client)
        assert [d.text for d in deltas] == ["a", "b", "c", ""]
        assert deltas[-1].finish_reason == "length" and deltas[-1].cached_tokens == 2
    assert server.connections == 1
    path, headers, body = server.requests[0]
    assert path == "/v1/chat/completions" and headers["authorization"] == "Bearer k" and body == {"messages": []}
    await client.aclose()
    listener.close()


async def test_an_error_status_has_its_body():
    async def refuse(writer: asyncio.StreamWriter) -> AsyncIterator[None]:
        body = b'{"error": {"message": "too long"}}'
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        yield

    listener, url = await serving(Server([refuse]))
    async with SseClient(url, {}).post("/x", {}) as response:
        assert response.status == 400 and json.loads(await response.read())["error"]["message"] == "too long"
    listener.close()


async def test_leaving_a_stream_early_closes_its_connection():
    server = Server([endless, whole_stream])
    listener, url = await serving(server)
    client = SseClient(url, {})
    async with client.post("/x", {}) as response:
        async for _ in response.chunks():
            break
    await asyncio.wait_for(server.closed.wait(), 5)  # how llama.cpp learns to stop the request
    assert [d.text for d in await deltas_of(client)][:3] == ["a", "b", "c"]
    assert server.connections == 2
    listener.close()


async def test_a_connection_lost_mid_answer_raises():
    async def hang_up(writer: asyncio.StreamWriter) -> AsyncIterator[None]:
        writer.write(STREAM_HEAD + chunked(TOKENS[0])[:-5])
        yield
        writer.close()

    listener, url = await serving(Server([hang_up]))
    with pytest.raises(StreamError):
        await deltas_of(SseClient(url, {}))
    listener.close()


async def test_an_unreachable_server_raises():
    listener, url = await serving(Server([]))
    listener.close()
    await listener.wait_closed()
    with pytest.raises(StreamError):
        await deltas_of(SseClient(url, {}))


async def body(*pieces: bytes) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


async def test_body_deltas_take_events_split_or_together_and_crlf():
    raw = b"".join(TOKENS).replace(b"\n", b"\r\n") + END
    pieces = [raw[:5], raw[5:90], raw[90:]]  # the last holds several events
    deltas = [d async for d in sse_body_deltas(body(*pieces))]
    assert [d.text for d in deltas] == ["a", "b", "c", ""] and deltas[-1].finish_reason == "length"


async def test_body_deltas_raise_on_an_error_chunk():
    with pytest.raises(EngineError, match="slot gone"):
        [d async for d in sse_body_deltas(body(b'data: {"error": {"message": "slot gone"}}\n\n'))]


async def test_body_deltas_without_usage_end_with_the_finish_reason():
    deltas = [d async for d in sse_body_deltas(body(TOKENS[0], b": comment\n\n"))]
    assert [(d.text, d.finish_reason) for d in deltas] == [("a", None), ("", "stop")]


async def test_the_stop_string_an_upstream_names_ends_on_the_last_delta():
    """vLLM's `stop_reason` and SGLang's `matched_stop` when a string; a token id is not a stop string."""
    usage = sse({"choices": [], "usage": {"completion_tokens": 2}})
    for choice, named in (
        ({"stop_reason": "END"}, "END"),
        ({"stop_reason": None, "matched_stop": "END"}, "END"),
        ({"stop_reason": 128001}, None),
        ({}, None),
    ):
        last = sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop", **choice}]})
        deltas = [d async for d in sse_body_deltas(body(TOKENS[0], last, usage))]
        assert deltas[-1].finish_reason == "stop" and deltas[-1].stop_sequence == named, choice
        without_usage = [d async for d in sse_body_deltas(body(TOKENS[0], last))]
        assert without_usage[-1].stop_sequence == named, choice
