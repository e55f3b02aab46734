"""The rig of bench/fairness.py: the two keys and their loads, the simulator and vLLM modes, what
is recorded per request and per caller, the requests and Poisson arrivals, a fresh server per
scenario, and the closed and open loops that measure it."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bench.calibration import level_of
from bench.clients import StreamResult, stream_chat
from bench.common import MODEL_NAME, NO_STORE, OFFLINE_ENV, Progress, Stats, note, timed_sleep
from bench.load_requests import CLIENT_TIMEOUT_S, Planned, new_client, prompt_for
from bench.open_loop import drain_answers, send_on_schedule
from bench.servers import ServerProcess, app_argv, free_port, venv_python

if TYPE_CHECKING:
    import httpx

KEYS = {"alice": "sk-alice-00000001", "bob": "sk-bob-000000002"}
A, B = KEYS  # A floods, B is light
A_LOAD, B_LOAD = 3.0, 0.1  # x capacity
MAX_TOKENS, TEMPERATURE = 64, 0.7
SIM_LIMIT, SIM_TOKEN_MS = 8, 10.0
BASE_SETTINGS = [
    "logging.file=",
    "logging.level=WARNING",
    "server.ui=false",
    "server.keys=[" + ", ".join(f"{{name: {n}, key: {k}, class: medium}}" for n, k in KEYS.items()) + "]",
]
SIM_SETTINGS = [
    "engine.backend=sim",
    f"engine.sim.token_latency_ms={SIM_TOKEN_MS:g}",
    "engine.sim.natural_stop=false",
    "scheduler.limit.adaptive=false",
    f"scheduler.max_concurrency={SIM_LIMIT}",
]


@dataclass
class Mode:
    name: str
    model: str
    settings: list[str]
    duration_s: float
    workers: int  # closed-loop capacity measurement
    capacity_s: float


SIM = Mode("simulator", "sim", SIM_SETTINGS, 30.0, SIM_LIMIT, 10.0)
REAL = Mode("vLLM", MODEL_NAME, [], 120.0, 32, 40.0)


@dataclass
class Record:
    """One request as the client saw it; seconds, nan (null in JSON) where it never happened."""

    caller: str
    planned_s: float
    status: int
    error: str  # "" when a full answer came
    ttft_s: float
    e2e_s: float
    decode_s: float  # first to last token
    ended_s: float  # after the run's start
    tokens: int

    def refusal(self) -> str:
        return "queue full" if "queue is full" in self.error else "wait" if "would hold" in self.error else "other"


@dataclass
class Side:
    """One caller in one scenario."""

    sent: int
    completed: int
    refused: dict[str, int]  # 429s by reason
    failed: int
    ttft: Stats
    decode: Stats
    e2e: Stats
    rps: float
    tok_s: float
    errors: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- requests and servers


def request(mode: Mode, caller: str, index: int) -> tuple[dict[str, Any], dict[str, str]]:
    body = {
        "model": mode.model,
        "messages": [{"role": "user", "content": prompt_for(index)}],
        "cache": False,
        "max_tokens": MAX_TOKENS,
        "temperature": TEMPERATURE,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return body, {"Authorization": f"Bearer {KEYS[caller]}", **NO_STORE}


def arrivals(seed: int, caller: str, rate: float, duration_s: float, first_index: int) -> list[Planned]:
    """Poisson arrivals from the caller's own generator: the same whatever the other caller does."""
    rng, out = random.Random(f"{seed}-{caller}"), []
    t = rng.expovariate(rate)
    while t < duration_s:
        out.append(Planned(first_index + len(out), t, caller))
        t += rng.expovariate(rate)
    return out


@contextlib.contextmanager
def serving(mode: Mode, fair: bool, extra: list[str], label: str) -> Iterator[ServerProcess]:
    """A fresh server, healthy and warmed up; always stopped."""
    settings = [*BASE_SETTINGS, *mode.settings, f"scheduler.fair_share.enabled={str(fair).lower()}", *extra]
    port = free_port()
    server = ServerProcess(
        label, app_argv(port, settings, venv_python()), port, "/healthz", OFFLINE_ENV, log_prefix="bench-fairness"
    )
    note(f"starting our server ({mode.name}, fair share {'on' if fair else 'off'}) on :{port} ...")
    server.start()
    try:
        server.wait_ready(step_s=0.2, progress=mode is REAL)
        asyncio.run(warm_up(server, mode))
        yield server
    finally:
        server.stop()


async def warm_up(server: ServerProcess, mode: Mode) -> None:
    """Two requests per key together, not recorded: lazy paths, and the door's drain estimate."""
    async with new_client(server.url) as client:
        results = await asyncio.gather(
            *(stream_chat(client, *request(mode, c, -1 - i), 120) for c in KEYS for i in range(2))
        )
    if failed := [r.error for r in results if r.error]:
        raise RuntimeError(f"warm-up failed: {failed[0]}")


# ----------------------------------------------------------------------------- measuring


async def closed_loop(server: ServerProcess, mode: Mode) -> tuple[float, float]:
    """A alone, `workers` back to back: (req/s, mean end-to-end s) of requests sent after a warm-up."""
    done: list[StreamResult] = []
    warm_s = min(5.0, mode.capacity_s / 2)

    async def worker(client: httpx.AsyncClient, w: int) -> None:
        for i in itertools.count():
            done.append(await stream_chat(client, *request(mode, A, -1000 * (w + 1) - i), CLIENT_TIMEOUT_S))

    async with new_client(server.url) as client:
        begin = time.perf_counter() + warm_s
        tasks = [asyncio.create_task(worker(client, w)) for w in range(mode.workers)]
        await timed_sleep(f"capacity, closed loop x{mode.workers}", warm_s + mode.capacity_s)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    sample = [r for r in done if r.ok and r.sent >= begin]
    if not sample:
        raise RuntimeError(f"capacity: no answer completed ({next((r.error for r in done if r.error), 'none')})")
    level = level_of(mode.workers, sample)
    return level.rps, level.e2e_mean_s


async def open_loop(server: ServerProcess, mode: Mode, label: str, plan: list[Planned]) -> list[Record]:
    records: list[Record] = []
    async with new_client(server.url) as client:
        t0 = time.perf_counter()

        async def one(p: Planned) -> None:
            r = await stream_chat(client, *request(mode, p.cls, p.index), CLIENT_TIMEOUT_S)
            records.append(
                Record(p.cls, p.at_s, r.status, r.error, r.ttft_s, r.e2e_s, r.decode_s, (r.ended or t0) - t0, r.tokens)
            )

        tasks = await send_on_schedule(plan, t0, one, Progress(f"{label} sending", len(plan), "req"))
        await drain_answers(tasks, Progress(f"{label} answers", len(tasks), "req"))
    return records


def side(records: list[Record], caller: str, duration_s: float) -> Side:
    mine = [r for r in records if r.caller == caller]
    ok = [r for r in mine if not r.error]
    in_window = [r for r in ok if r.ended_s <= duration_s]
    refused: dict[str, int] = {}
    for r in (r for r in mine if r.status == 429):
        refused[r.refusal()] = refused.get(r.refusal(), 0) + 1
    failed = [r for r in mine if r.error and r.status != 429]
    return Side(
        len(mine),
        len(ok),
        refused,
        len(failed),
        *(Stats.of([getattr(r, f) for r in ok]) for f in ("ttft_s", "decode_s", "e2e_s")),
        len(in_window) / duration_s,
        sum(r.tokens for r in in_window) / duration_s,
        [f"{r.status} {r.error}" for r in failed[:3]],
    )
