"""Shared fixtures: a real uvicorn server on a loopback port around the simulator engine."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx
import openai
import pytest
import uvicorn

from api.connection import uvicorn_settings
from app import app_for
from settings import load_config
from wiring import Services, build_services

_STORES = tempfile.mkdtemp(prefix="stores-")  # not the repo's data/
_RESPONSES = f"responses.path={_STORES}/responses.sqlite3"
_BATCHES = f"batches.path={_STORES}/batches.sqlite3"
_USAGE = "usage.path="  # in memory: a test's usage is its own
_PACE = "scheduler.limit.pace_path="  # each test server learns its engine afresh
FAST_SIM = [
    _RESPONSES,
    _BATCHES,
    _USAGE,
    _PACE,
    "engine.backend=sim",
    "engine.sim.token_latency_ms=1",
    "engine.sim.prefill_ms_per_token=0",
    "engine.sim.natural_stop=false",
    "logging.file=",
    "cache.enabled=false",
    "monitor.gpu=false",
    "server.ui=false",
]
VLLM = [
    _RESPONSES,
    _BATCHES,
    _USAGE,
    _PACE,
    "engine.backend=vllm",
    "engine.vllm.max_num_seqs=1",
    "engine.vllm.kv_cache_memory_bytes=268435456",
    "scheduler.max_concurrency=8",
    "logging.file=",
    "cache.enabled=false",
    "monitor.gpu=false",
    "server.ui=false",
]


@dataclass
class LiveServer:
    url: str
    services: Services
    server: uvicorn.Server
    clients: list[openai.OpenAI] = field(default_factory=list)
    status_key: str | None = None  # sent with status() where keys are required

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def client(self, **kwargs) -> openai.OpenAI:
        """An official client, closed with the server so no socket is left to the garbage collector."""
        client = openai.OpenAI(
            base_url=self.base_url,
            api_key=kwargs.pop("api_key", "sk-test"),
            max_retries=kwargs.pop("max_retries", 0),
            **kwargs,
        )
        self.clients.append(client)
        return client

    def http(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30, **kwargs)

    def status(self, **params) -> dict:
        headers = {"Authorization": f"Bearer {self.status_key}"} if self.status_key else {}
        return httpx.get(self.url + "/v1/queue/status", params=params, headers=headers, timeout=10).json()

    def wait_for(self, predicate: Callable[[dict], bool], timeout: float = 10.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status()
            if predicate(status):
                return status
            time.sleep(0.02)
        raise AssertionError(f"queue never reached the expected state; last: {status}")


@contextlib.contextmanager
def live_server(
    *overrides: str,
    wait_ready: bool = True,
    base: list[str] = FAST_SIM,
    startup_timeout: float = 15,
    prepare: Callable[[Services], None] | None = None,
) -> Iterator[LiveServer]:
    """`prepare` may replace parts of the services (a fake GPU reader, say) before the server starts."""
    config = load_config(None, overrides=[*base, *overrides])
    failures: list[BaseException] = []
    services = build_services(config)
    if prepare is not None:
        prepare(services)
    app = app_for(services, failures.append)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2, **uvicorn_settings(config.server))
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    live = LiveServer(f"http://127.0.0.1:{port}", services, server)
    deadline = time.monotonic() + startup_timeout
    while not (server.started and (services.engine.ready or not wait_ready)):
        if failures:
            server.should_exit = True
            raise RuntimeError(f"the engine did not start: {failures[0]}")
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    if failures:  # a part that failed at start-up (a shared cache that does not answer)
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()
        raise RuntimeError(f"the server did not start: {failures[0]}")
    try:
        yield live
    finally:
        for client in live.clients:
            client.close()
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


@pytest.fixture(scope="session")
def vllm_installed() -> None:
    """Skips where vLLM is missing, unless REQUIRE_VLLM (set by CI) makes that a failure."""
    if importlib.util.find_spec("vllm") is None:
        if os.environ.get("REQUIRE_VLLM"):
            pytest.fail("vLLM is not installed but REQUIRE_VLLM is set")
        pytest.skip("vLLM is not installed (make test installs it)")


@pytest.fixture(scope="session")
def vllm_server(vllm_installed: None) -> Iterator[LiveServer]:
    """The real vLLM engine with one engine slot, shared by every vLLM test of the run."""
    with live_server(base=VLLM, startup_timeout=600) as live:
        yield live


@contextlib.contextmanager
def redis_server(folder: str) -> Iterator[str]:
    """A real redis-server on a loopback port (no persistence), stopped on the way out; skips
    where Debian's redis-server is missing, unless REQUIRE_REDIS (set by CI) makes that a failure."""
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("REQUIRE_REDIS"):
            pytest.fail("redis-server is not installed but REQUIRE_REDIS is set")
        pytest.skip("redis-server is not installed (.ci/run installs Debian's)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", folder],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2) as conn:
            conn.sendall(b"PING\r\n")
            if conn.recv(16).startswith(b"+PONG"):
                break
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("redis-server did not start")
        time.sleep(0.05)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One Redis for the whole run."""
    with redis_server(str(tmp_path_factory.mktemp("redis"))) as url:
        yield url
