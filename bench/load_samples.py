"""What bench/load.py samples of a server every second while it is under load: the RSS of its
process tree, and its queue as it reports it (ours: /v1/queue/status; vLLM and llama.cpp: their
Prometheus /metrics)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

from bench.load_records import Run, Sample
from bench.machine import tree_cpu_s, tree_rss_bytes
from bench.open_loop import metric_sum
from bench.servers import ServerProcess

if TYPE_CHECKING:
    import httpx

SAMPLE_INTERVAL_S = 1.0
_QUIET_READ_S = 0.5
_QUIET_CORES = 0.1  # a server using less than this share of one core is idle


async def sample_forever(server: ServerProcess, client: httpx.AsyncClient, run: Run, t0: float) -> None:
    """Until cancelled: every SAMPLE_INTERVAL_S, the server tree's RSS and what its own status or
    metrics say of its queue, appended to `run.samples`."""
    while True:
        sample = Sample(time.perf_counter() - t0, server.alive(), tree_rss_bytes(server.pid) if server.alive() else 0)
        if sample.alive:
            with contextlib.suppress(Exception):  # a busy or dying server: keep the RSS reading alone
                sampler = {"ours": _sample_ours, "llama.cpp": _sample_llamacpp}.get(server.name, _sample_vllm)
                await sampler(client, sample)
        run.samples.append(sample)
        await asyncio.sleep(max(0.0, SAMPLE_INTERVAL_S - (time.perf_counter() - t0 - sample.t_s)))


async def until_idle(server: ServerProcess, client: httpx.AsyncClient, limit_s: float = 120.0) -> float:
    """Waits until the server says nothing runs or waits and its processes use under a tenth of a
    core (two readings in a row: llama.cpp refreshes its metrics with its slots), at most
    `limit_s`; returns the seconds waited. A closed loop's cancelled streams kept llama.cpp's own
    server busy for seconds after the client closed them: the next run, on another server of the
    same two cores, lost its first seconds to them (first tokens 2.5 s where 0.23 s was the norm).
    The CPU reading is for work no request shows (llama.cpp keeping finished prompts in RAM)."""
    sampler = {"ours": _sample_ours, "llama.cpp": _sample_llamacpp}.get(server.name, _sample_vllm)
    start, quiet = time.perf_counter(), 0
    cpu = tree_cpu_s(server.pid)
    while quiet < 2 and time.perf_counter() - start < limit_s:
        sample = Sample(0.0, True, 0)
        with contextlib.suppress(Exception):
            await sampler(client, sample)
        await asyncio.sleep(_QUIET_READ_S)
        now = tree_cpu_s(server.pid)
        idle = sample.running == 0 and not sample.waiting and now - cpu < _QUIET_CORES * _QUIET_READ_S
        cpu = now
        quiet = quiet + 1 if idle else 0
    return time.perf_counter() - start


async def _sample_ours(client: httpx.AsyncClient, sample: Sample) -> None:
    status = (await client.get("/v1/queue/status", timeout=2)).json()
    sample.waiting, sample.running = status.get("waiting_total"), status.get("running")
    sample.max_queue_size = status.get("max_queue_size")
    sample.concurrency_limit = status.get("slots")
    sample.measured_tpot_s = status.get("measured_tpot_s")
    sample.tpot_set_point_s = status.get("tpot_set_point_s")
    sample.idle_wait_s = status.get("idle_wait_s")
    sample.taken_back = status.get("taken_back")


async def _sample_vllm(client: httpx.AsyncClient, sample: Sample) -> None:
    text = (await client.get("/metrics", timeout=2)).text
    sample.waiting = int(metric_sum(text, "vllm:num_requests_waiting"))
    sample.running = int(metric_sum(text, "vllm:num_requests_running"))


async def _sample_llamacpp(client: httpx.AsyncClient, sample: Sample) -> None:
    text = (await client.get("/metrics", timeout=2)).text
    sample.waiting = int(metric_sum(text, "llamacpp:requests_deferred"))
    sample.running = int(metric_sum(text, "llamacpp:requests_processing"))
