"""The rig of bench/cluster.py: the upstreams (our server on the simulator, a fixed running
limit), a fresh gateway in front of them, a throwaway redis-server, the requests they are sent and
the loops that send them (closed loop for capacity, open loop on a Poisson plan)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.calibration import level_of
from bench.clients import StreamResult, stream_chat
from bench.common import PROMPTS, Progress, timed_sleep
from bench.load_requests import CLIENT_TIMEOUT_S, Planned, new_client, prompt_for
from bench.open_loop import drain_answers, metric_sum, send_on_schedule
from bench.servers import ServerProcess, app_argv, free_port, venv_python

if TYPE_CHECKING:
    import httpx

Req = tuple[dict[str, Any], dict[str, str]]  # a chat completion's body and headers

LIMIT, TOKEN_MS, MAX_TOKENS = 8, 50.0, 32  # per upstream: running limit, simulator step, answer length
QUIET = [
    "server.ui=false",
    "monitor.gpu=false",
    "logging.file=",
    "scheduler.limit.adaptive=false",
    "scheduler.max_queue_size=100000",
]
UPSTREAM = [
    *QUIET,
    "engine.backend=sim",
    f"engine.sim.token_latency_ms={TOKEN_MS:g}",
    "engine.sim.natural_stop=false",
    f"scheduler.max_concurrency={LIMIT}",
    "cache.enabled=false",
    "logging.level=INFO",
]  # INFO: finished ids
GATEWAY = [
    *QUIET,
    "engine.backend=openai",
    "engine.openai.send_priority=false",
    "cache.enabled=false",
    "logging.level=WARNING",
]


@dataclass
class Record:
    """One request as the client saw it; seconds after the run's start, nan where it never happened."""

    id: str
    cls: str
    sent_s: float
    ended_s: float
    ttft_s: float
    started: bool  # a content token arrived
    error: str


# ----------------------------------------------------------------------------- processes


def upstream_process(index: int) -> ServerProcess:
    port = free_port()
    return ServerProcess(f"upstream{index}", app_argv(port, UPSTREAM, venv_python()), port, log_prefix="bench-cluster")


@contextlib.contextmanager
def gateway(upstreams: list[ServerProcess], extra: list[str], name: str = "gateway") -> Iterator[ServerProcess]:
    """A fresh gateway in front of `upstreams`, healthy and warmed up; always stopped."""
    urls = ",".join(f"{u.url}/v1" for u in upstreams)
    settings = [
        *GATEWAY,
        f"engine.openai.upstreams=[{urls}]",
        f"engine.openai.slots_per_upstream={LIMIT}",
        f"scheduler.max_concurrency={LIMIT * len(upstreams)}",
        *extra,
    ]
    port = free_port()
    server = ServerProcess(name, app_argv(port, settings, venv_python()), port, log_prefix="bench-cluster")
    server.start()
    try:
        server.wait_ready(step_s=0.1)
        asyncio.run(
            one_round(
                [
                    (server.url, request(f"warm-{name}-{i}", "high", prompt_for(-1 - i)))
                    for i in range(2 * len(upstreams))
                ]
            )
        )
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def redis_server() -> Iterator[int]:
    """A throwaway redis-server (nothing saved) on a free port; yields the port, always stopped."""
    import redis

    port = free_port()
    server = ServerProcess(
        "redis",
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        port,
        log_prefix="bench-cluster",
    )
    server.start()
    try:
        for _ in range(100):
            with contextlib.suppress(redis.RedisError):
                if redis.Redis(port=port, socket_timeout=1).ping():
                    break
            time.sleep(0.1)
        else:
            server.failed = True  # keeps its log
            raise RuntimeError(f"redis-server did not answer on :{port}; log: {server.log.name}")
        yield port
    finally:
        server.stop()


def admitted(servers: list[ServerProcess]) -> list[float]:
    import httpx

    return [
        metric_sum(httpx.get(s.url + "/metrics", timeout=5).text, "gptoss_requests_admitted_total") for s in servers
    ]


def shares(counts: list[float]) -> str:
    """Each upstream's part of the requests, "34 / 33 / 33 %"."""
    return " / ".join(f"{100 * c / sum(counts):.0f}" for c in counts) + " %" if sum(counts) else "-"


# ----------------------------------------------------------------------------- requests


def request(rid: str, cls: str, text: str | list[dict[str, str]], temperature: float = 0.7) -> Req:
    messages = [{"role": "user", "content": text}] if isinstance(text, str) else text
    return (
        {
            "model": "sim",
            "messages": messages,
            "max_tokens": MAX_TOKENS,
            "temperature": temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        {"X-Priority": cls, "X-Request-ID": rid},
    )


def affinity_messages(index: int) -> tuple[str, list[dict[str, str]]]:
    """Alternately a single question under one of 4 system prompts, or a conversation's next turn
    (its system prompt and first user message shared by every turn of it)."""
    kind, group = ("system", "conversation")[index % 2], (index // 2) % 4
    messages = [{"role": "system", "content": f"You are assistant {group} of a travel company. {PROMPTS[group]}"}]
    if kind == "conversation":
        messages += [{"role": "user", "content": PROMPTS[4 + group]}, {"role": "assistant", "content": "Gladly."}]
    return f"{kind}{group}", [*messages, {"role": "user", "content": f"Question {index}: {PROMPTS[index % 8][:90]}"}]


async def one_round(jobs: list[tuple[str, Req]]) -> list[StreamResult]:
    """Requests sent together, each (server URL, request); raises on any error."""

    async def one(url: str, body: dict[str, Any], headers: dict[str, str]) -> StreamResult:
        async with new_client(url) as client:
            return await stream_chat(client, body, headers, 60)

    results = await asyncio.gather(*(one(url, *req) for url, req in jobs))
    if failed := [f"{url}: {r.error}" for (url, _), r in zip(jobs, results) if r.error]:
        raise RuntimeError(failed[0])
    return list(results)


async def closed_loop(url: str, warm_s: float = 2.0, measure_s: float = 6.0) -> tuple[float, float]:
    """LIMIT workers back to back against one upstream: (req/s, mean end-to-end s) after a warm-up."""
    done: list[StreamResult] = []
    begin = time.perf_counter() + warm_s
    end = begin + measure_s

    async def worker(client: httpx.AsyncClient, w: int) -> None:
        while time.perf_counter() < end:
            done.append(await stream_chat(client, *request(f"cap-{w}-{len(done)}", "low", prompt_for(len(done)))))

    async with new_client(url) as client:
        await asyncio.gather(
            timed_sleep("capacity, one upstream, closed loop", warm_s + measure_s),
            *(worker(client, w) for w in range(LIMIT)),
        )
    level = level_of(LIMIT, [r for r in done if r.ok and r.sent >= begin])
    if not level.completed:
        raise RuntimeError(f"capacity: no answer completed ({next((r.error for r in done if r.error), 'none')})")
    return level.rps, level.e2e_mean_s


async def open_loop(
    url: str,
    plan: list[Planned],
    label: str,
    make: Callable[[Planned], Req],
    during: Callable[[float], Awaitable[None]] | None = None,
) -> list[Record]:
    records: list[Record] = []
    async with new_client(url) as client:
        t0 = time.perf_counter()
        side = asyncio.create_task(during(t0)) if during else None

        async def one(p: Planned) -> None:
            body, headers = make(p)
            r = await stream_chat(client, body, headers, CLIENT_TIMEOUT_S)
            records.append(
                Record(
                    headers["X-Request-ID"],
                    p.cls,
                    r.sent - t0,
                    (r.ended or r.sent) - t0,
                    r.ttft_s,
                    r.first_content is not None,
                    r.error,
                )
            )

        tasks = await send_on_schedule(plan, t0, one, Progress(f"{label} sending", len(plan), "req"))
        await drain_answers(tasks, Progress(f"{label} answers", len(tasks), "req"))
        if side:
            await side
    return records
