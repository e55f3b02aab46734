"""A tiny OpenAI-compatible upstream for the gateway tests: it serves vLLM-style /metrics with
figures the test sets, streams a fixed answer slowly, records every body it gets and every client
that left early, and can be told to fail."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class FakeUpstream:
    name: str
    url: str = ""
    running: int = 0
    waiting: int = 0
    status: int = 200  # what /v1/chat/completions answers; 503 makes it fail before the first token
    models_status: int = 200  # what /v1/models (the health check) answers
    token_delay_s: float = 0.01
    tokens: int = 5
    bodies: list[dict] = field(default_factory=list)
    disconnected: list[str] = field(default_factory=list)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/models", self._models),
                Route("/metrics", self._metrics),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
            ]
        )

    async def _models(self, _: Request) -> Response:
        if self.models_status != 200:
            return JSONResponse({"error": {"message": "down"}}, status_code=self.models_status)
        return JSONResponse(
            {"object": "list", "data": [{"id": "fake-model", "object": "model", "max_model_len": 2048}]}
        )

    async def _metrics(self, _: Request) -> Response:
        return PlainTextResponse(
            f'vllm:num_requests_running{{model_name="fake-model"}} {self.running}\n'
            f'vllm:num_requests_waiting{{model_name="fake-model"}} {self.waiting}\n'
            f'vllm:kv_cache_usage_perc{{model_name="fake-model"}} 0.1\n'
        )

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        self.bodies.append(body)
        if self.status != 200:
            return JSONResponse({"error": {"message": "upstream trouble"}}, status_code=self.status)
        rid = request.headers.get("x-request-id", "?")
        return StreamingResponse(self._stream(rid, body), media_type="text/event-stream")

    async def _stream(self, rid: str, body: dict):
        finished = False
        try:
            for i in range(min(self.tokens, body.get("max_tokens", self.tokens))):
                await asyncio.sleep(self.token_delay_s)
                yield _sse({"choices": [{"index": 0, "delta": {"content": f"{self.name}{i} "}, "finish_reason": None}]})
            yield _sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
            yield _sse(
                {
                    "choices": [],
                    "usage": {"prompt_tokens": 7, "completion_tokens": self.tokens, "total_tokens": 7 + self.tokens},
                }
            )
            yield "data: [DONE]\n\n"
            finished = True
        finally:
            if not finished:  # the client left: cancelled or closed mid-stream
                self.disconnected.append(rid)


def _sse(data: dict) -> str:
    return f"data: {json.dumps(data)}\n\n"


@contextlib.contextmanager
def running(*upstreams: FakeUpstream) -> Iterator[list[FakeUpstream]]:
    servers = []
    for upstream in upstreams:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        upstream.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        server = uvicorn.Server(uvicorn.Config(upstream.app(), log_level="warning", timeout_graceful_shutdown=1))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        servers.append((server, thread, sock))
    deadline = time.monotonic() + 10
    while not all(s.started for s, _, _ in servers) and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield list(upstreams)
    finally:
        for server, thread, sock in servers:
            server.should_exit = True
            thread.join(timeout=10)
            sock.close()
