"""The HTTP clients of the benchmarks: closed-loop non-streaming load, and one streamed chat
completion read chunk by chunk (first-token time, pace, usage, errors)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bench.common import Progress, Stats
from bench.machine import own_cpu_s, process_cpu_s

if TYPE_CHECKING:
    import httpx


# ----------------------------------------------------------------------------- closed-loop load


@dataclass
class LoadResult:
    """Non-streaming requests of one closed-loop cell: latencies, X-Cache counts, CPU time."""

    latencies_s: list[float] = field(default_factory=list)
    cache_status: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    wall_s: float = 0.0
    client_cpu_s: float = 0.0
    server_cpu_s: float | None = 0.0
    error_sample: str = ""

    def merge(self, other: LoadResult) -> None:
        self.latencies_s.extend(other.latencies_s)
        for k, v in other.cache_status.items():
            self.cache_status[k] = self.cache_status.get(k, 0) + v
        self.errors += other.errors
        self.wall_s += other.wall_s
        self.client_cpu_s += other.client_cpu_s
        if self.server_cpu_s is None or other.server_cpu_s is None:
            self.server_cpu_s = None
        else:
            self.server_cpu_s += other.server_cpu_s
        self.error_sample = self.error_sample or other.error_sample


def one_connection_client(url: str, timeout_s: float = 30) -> httpx.AsyncClient:
    """One client per worker, one keep-alive connection each: a single AsyncClient's shared pool
    collapses past ~8 concurrent requests (about 350 req/s at 32 here, against a server that does
    several thousand), which would measure httpx rather than the server."""
    import httpx

    return httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=httpx.Limits(max_connections=1))


async def repeat_load(
    url: str,
    pid: int,
    body: dict[str, Any],
    headers: dict[str, str],
    concurrency: int,
    warmup_s: float,
    duration_s: float,
    label: str,
) -> LoadResult:
    """The same non-streaming request from `concurrency` workers, back to back, for duration_s after
    warmup_s (connections opened and code paths warm, nothing recorded); X-Cache values counted."""
    import httpx

    result = LoadResult()
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(one_connection_client(url)) for _ in range(concurrency)]
        recording = False
        stop_at = 0.0

        async def worker(client: httpx.AsyncClient) -> None:
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                try:
                    response = await client.post("/v1/chat/completions", json=body, headers=headers)
                    ok = response.status_code == 200
                    if not ok and not result.error_sample:
                        result.error_sample = f"{response.status_code} {response.text[:200]}"
                    status = response.headers.get("x-cache", "none")
                except httpx.HTTPError as exc:
                    ok, status = False, "error"
                    result.error_sample = result.error_sample or repr(exc)
                dt = time.perf_counter() - t0
                if recording and ok:
                    result.latencies_s.append(dt)
                    result.cache_status[status] = result.cache_status.get(status, 0) + 1
                elif recording:
                    result.errors += 1

        stop_at = time.perf_counter() + warmup_s
        await asyncio.gather(*(worker(c) for c in clients))
        recording = True
        server_cpu0, client_cpu0 = process_cpu_s(pid), own_cpu_s()
        start = time.perf_counter()
        stop_at = start + duration_s
        progress = Progress(label, float(duration_s), "s")
        rep = asyncio.create_task(
            _report_every(
                0.5, lambda: progress.update(round(time.perf_counter() - start, 1), f"{len(result.latencies_s):,} req")
            )
        )
        await asyncio.gather(*(worker(c) for c in clients))
        result.wall_s = time.perf_counter() - start
        server_cpu1 = process_cpu_s(pid)
        result.client_cpu_s = own_cpu_s() - client_cpu0
        result.server_cpu_s = None if server_cpu0 is None or server_cpu1 is None else server_cpu1 - server_cpu0
        rep.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await rep
        progress.done(f"{len(result.latencies_s):,} req")
    return result


async def _report_every(interval_s: float, report: Any) -> None:
    while True:
        await asyncio.sleep(interval_s)
        report()


def load_row(name: str, concurrency: int, r: LoadResult) -> tuple[list[object], Stats, float | None]:
    """A table row for one closed-loop cell (latencies in ms), its Stats and server CPU us/request."""
    st = Stats.of([x * 1000 for x in r.latencies_s])
    rps = len(r.latencies_s) / r.wall_s if r.wall_s else 0.0
    cpu_us = r.server_cpu_s / st.n * 1e6 if r.server_cpu_s is not None and st.n else None
    row: list[object] = [
        name,
        concurrency,
        f"{st.n:,}",
        r.errors,
        f"{rps:,.0f}",
        f"{st.p50:.2f}",
        f"{st.p99:.2f}",
        f"{st.mean:.2f}",
        f"{st.max:.2f}",
        f"{cpu_us:,.0f}" if cpu_us is not None else "-",
        f"{r.client_cpu_s / r.wall_s:.0%}" if r.wall_s else "-",
    ]
    return row, st, cpu_us


# ----------------------------------------------------------------------------- one streamed chat completion


@dataclass
class StreamResult:
    """What the client saw of one streamed chat completion (times are time.perf_counter values)."""

    sent: float = 0.0
    status: int = 0  # HTTP status; 0 when no response came
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names
    first_content: float | None = None  # first chunk with a non-empty delta.content
    last_content: float | None = None
    ended: float | None = None
    completion_tokens: int | None = None  # from the usage chunk
    dispatched_wait_ms: float | None = None  # ours, when the stream opened while still queued
    dispatched: float | None = None  # ...and when that comment came
    first_notice: float | None = None  # ours: when the first `queue position=N estimated_wait_s=X` came
    first_eta_s: float | None = None  # ...its X (None: "unknown")
    error: str = ""
    error_kind: str = ""  # http (status != 200), stream (error chunk in a 200 stream), transport, timeout, incomplete
    error_code: str | None = None  # the OpenAI error object's code, of an http or stream error

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def tokens(self) -> int:
        return self.completion_tokens or 0

    @property
    def ttft_s(self) -> float:
        return self.first_content - self.sent if self.first_content is not None else float("nan")

    @property
    def decode_s(self) -> float:
        """First to last content chunk."""
        if self.first_content is None or self.last_content is None:
            return float("nan")
        return self.last_content - self.first_content

    @property
    def tpot_s(self) -> float:
        """Time per output token after the first; nan under two tokens."""
        return self.decode_s / (self.tokens - 1) if self.tokens >= 2 else float("nan")

    @property
    def e2e_s(self) -> float:
        return self.ended - self.sent if self.ended is not None else float("nan")


def _fail(result: StreamResult, kind: str, message: str) -> StreamResult:
    result.error_kind, result.error = kind, message[:200]
    result.ended = time.perf_counter()
    return result


async def stream_chat(
    client: httpx.AsyncClient,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> StreamResult:
    """POST one streaming chat completion and time it. `data:` lines carry JSON chunks; lines
    starting with `:` are comments (ours sends queue notices and `dispatched queue_wait_ms=N`
    as comments while a request waits); `{"error": ...}` inside a 200 stream is a stream error."""
    import httpx

    result = StreamResult(sent=time.perf_counter())
    try:
        async with contextlib.AsyncExitStack() as stack:
            if timeout_s is not None:
                await stack.enter_async_context(asyncio.timeout(timeout_s))
            await _read_stream(client, body, headers or {}, result)
    except TimeoutError:
        return _fail(result, "timeout", f"no complete answer within {timeout_s:g} s")
    except (httpx.HTTPError, ValueError) as exc:
        return _fail(result, "transport", repr(exc))
    if not result.error and (result.completion_tokens is None or result.first_content is None):
        _fail(result, "incomplete", "no usage chunk" if result.completion_tokens is None else "no content")
    result.ended = result.ended or time.perf_counter()
    return result


async def _read_stream(
    client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str], result: StreamResult
) -> None:
    perf = time.perf_counter
    async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
        result.status = response.status_code
        result.headers = {k.lower(): v for k, v in response.headers.items()}
        if response.status_code != 200:
            raw = await response.aread()
            with contextlib.suppress(ValueError, AttributeError, TypeError):
                result.error_code = json.loads(raw)["error"]["code"]
            _fail(result, "http", f"{response.status_code} {raw[:200]!r}")
            return
        async for line in response.aiter_lines():
            if line.startswith(":"):
                _read_comment(line, result, perf())
                continue
            if not line.startswith("data:"):
                continue  # blank separators
            data = line[5:].strip()
            if data == "[DONE]":
                break
            obj = json.loads(data)
            if "error" in obj:
                result.error_code = (obj["error"] or {}).get("code")
                _fail(result, "stream", f"stream error {json.dumps(obj['error'])}")
                return
            if obj.get("usage"):
                result.completion_tokens = obj["usage"].get("completion_tokens")
            for choice in obj.get("choices") or ():
                if (choice.get("delta") or {}).get("content"):
                    result.last_content = perf()
                    if result.first_content is None:
                        result.first_content = result.last_content
    result.ended = perf()


def _read_comment(line: str, result: StreamResult, now: float) -> None:
    key, eta = "dispatched queue_wait_ms=", "estimated_wait_s="
    if key in line:
        result.dispatched = now
        with contextlib.suppress(ValueError):
            result.dispatched_wait_ms = float(line.split(key, 1)[1].split()[0])
    elif eta in line and result.first_notice is None:
        result.first_notice = now
        with contextlib.suppress(ValueError):  # "unknown" before anything has finished
            result.first_eta_s = float(line.split(eta, 1)[1].split()[0])
