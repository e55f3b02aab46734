"""Shared fixtures: a real uvicorn server on a loopback port around the simulator engine."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import httpx
import openai
import pytest
import uvicorn

from api.services import Services
from app import build_app
from settings import load_config

FAST_SIM = ["engine.sim.token_latency_ms=1", "engine.sim.prefill_ms_per_token=0", "logging.file="]


@dataclass
class LiveServer:
    url: str
    services: Services
    server: uvicorn.Server

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def client(self, **kwargs) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=kwargs.pop("api_key", "sk-test"), max_retries=0,
                             **kwargs)

    def http(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30, **kwargs)

    def status(self, **params) -> dict:
        return httpx.get(self.url + "/v1/queue/status", params=params, timeout=10).json()

    def wait_for(self, predicate: Callable[[dict], bool], timeout: float = 10.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status()
            if predicate(status):
                return status
            time.sleep(0.02)
        raise AssertionError(f"queue never reached the expected state; last: {status}")


@contextlib.contextmanager
def live_server(*overrides: str, wait_ready: bool = True) -> Iterator[LiveServer]:
    config = load_config(None, overrides=[*FAST_SIM, *overrides])
    app, services = build_app(config)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    live = LiveServer(f"http://127.0.0.1:{port}", services, server)
    deadline = time.monotonic() + 15
    while not (server.started and (services.engine.ready or not wait_ready)):
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    try:
        yield live
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    """One fast server shared by a module's tests that do not change its settings."""
    with live_server() as live:
        yield live


@pytest.fixture
def make_server() -> Iterator[Callable[..., LiveServer]]:
    """A server with its own settings, e.g. make_server("scheduler.max_concurrency=1")."""
    with contextlib.ExitStack() as stack:
        yield lambda *overrides, **kw: stack.enter_context(live_server(*overrides, **kw))
