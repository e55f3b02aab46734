"""Shared by the monitor tests: /metrics scraping, calls from threads, fake GPU readers, a webhook receiver."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
from prometheus_client.parser import text_string_to_metric_families

from monitor.gpu import DeviceMemory

GIB = 1 << 30
SLOW = ("scheduler.max_concurrency=1", "engine.sim.token_latency_ms=20")


def chat(url: str, *, max_tokens: int = 5, headers: dict | None = None, timeout: float = 30, **body) -> httpx.Response:
    payload = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens, **body}
    return httpx.post(url + "/v1/chat/completions", json=payload, headers=headers or {}, timeout=timeout)


def in_thread(fn: Callable, *args, **kwargs) -> dict:
    """Runs fn in a thread; box["result"] or box["error"] once box["thread"] is joined."""
    box: dict = {}

    def target() -> None:
        try:
            box["result"] = fn(*args, **kwargs)
        except Exception as exc:  # the test inspects it after join
            box["error"] = exc
        box["done"] = time.monotonic()

    box["thread"] = threading.Thread(target=target)
    box["thread"].start()
    return box


def joined(box: dict, timeout: float = 30) -> httpx.Response:
    box["thread"].join(timeout)
    assert not box["thread"].is_alive(), "the request thread did not finish"
    if "error" in box:
        raise box["error"]
    return box["result"]


class Scrape:
    """One GET /metrics, parsed: families by name and sample values by (name, labels)."""

    def __init__(self, url: str) -> None:
        response = httpx.get(url + "/metrics", timeout=10)
        assert response.status_code == 200
        self.content_type = response.headers["content-type"]
        self.text = response.text
        self.families = {f.name: f for f in text_string_to_metric_families(self.text)}
        self.samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value for f in self.families.values() for s in f.samples
        }

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, tuple(sorted(labels.items()))))

    def get(self, name: str, **labels: str) -> float:
        """A sample value, 0 when absent (a labelled counter not yet incremented has no sample)."""
        return self.value(name, **labels) or 0.0


def poll_metrics(url: str, predicate: Callable[[Scrape], bool], timeout: float = 10) -> Scrape:
    deadline = time.monotonic() + timeout
    while True:
        scrape = Scrape(url)
        if predicate(scrape):
            return scrape
        if time.monotonic() > deadline:
            raise AssertionError(f"/metrics never reached the expected state; last:\n{scrape.text}")
        time.sleep(0.02)


def device(index: int, used_pct: float, total: int = 80 * GIB) -> DeviceMemory:
    return DeviceMemory(index, f"Fake GPU {index}", int(total * used_pct / 100), total, 50.0)


class FakeReader:
    """A MemoryReader whose readings the test sets: used percent per device."""

    def __init__(self, *used_pct: float) -> None:
        self.used_pct = list(used_pct)
        self.reads = 0

    def set(self, *used_pct: float) -> None:
        self.used_pct = list(used_pct)

    def read(self) -> list[DeviceMemory]:
        self.reads += 1
        return [device(i, pct) for i, pct in enumerate(self.used_pct)]


class Receiver:
    """A webhook receiver on loopback recording each POST's JSON body; `status` is its answer."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.status = 200
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length))
                with receiver._lock:
                    receiver.bodies.append(body)
                self.send_response(receiver.status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"

    def received(self) -> list[dict]:
        with self._lock:
            return list(self.bodies)

    def wait_for(self, predicate: Callable[[list[dict]], bool], timeout: float = 10) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            bodies = self.received()
            if predicate(bodies):
                return bodies
            time.sleep(0.02)
        raise AssertionError(f"the receiver never got the expected posts; got {self.received()}")


@contextlib.contextmanager
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    thread = threading.Thread(target=r.httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield r
    finally:
        r.httpd.shutdown()
        r.httpd.server_close()
        thread.join(5)
