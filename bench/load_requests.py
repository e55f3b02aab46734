"""What bench/load.py sends: Poisson arrival plans, prompts, and the body and headers each server
understands for a class. Shared with the calibration and bench/cluster*.py, so every server and
every benchmark gets the identical requests."""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.common import MODEL_NAME, NO_STORE, PROMPTS

if TYPE_CHECKING:
    import httpx

HIGH_SHARE = 0.2
MAX_TOKENS = 64
TEMPERATURE = 0.7
SEED_BASE = 1_000_000  # request indices start below 0 (warm-up, calibration); llama.cpp reads -1 as "random"
SEEDED = {"on": False}  # bench/load.py turns it on for llama.cpp: vLLM's CPU build crashes on seeded requests
CLIENT_TIMEOUT_S = 180.0
VLLM_PRIORITY = {"high": 0, "low": 1}  # vLLM runs lower values first


@dataclass
class Planned:
    index: int
    at_s: float  # planned send time after the run's start
    cls: str  # high | low


def make_plan(seed: int, rate: float, duration_s: float) -> list[Planned]:
    """Poisson arrivals with 20 % high. One seed for every load level: the same unit-rate draws
    scaled by the rate, so a level differs from another only in speed, never in luck."""
    if rate <= 0:
        raise RuntimeError(f"offered load must be above 0 req/s, got {rate:g}")
    rng = random.Random(seed)
    plan: list[Planned] = []
    t = rng.expovariate(1.0) / rate
    while t < duration_s:
        plan.append(Planned(len(plan), t, "high" if rng.random() < HIGH_SHARE else "low"))
        t += rng.expovariate(1.0) / rate
    return plan


_BATCH = {"tag": ""}


def fresh_prompts() -> None:
    """From now on every prompt is one no server has seen: a calibration, a warm-up and each run
    number their requests from 0, and a server that had seen "Request 7." before answered it from
    its prefix cache (llama.cpp's own server, calibrated just before its run, did: first tokens in
    25 ms where a new prompt takes 200)."""
    _BATCH["tag"] = secrets.token_hex(3) + "-"


def prompt_for(index: int) -> str:
    """About 50 words, different for every request index and every `fresh_prompts` (no
    prefix-cache or response-cache hits)."""
    return f"Request {_BATCH['tag']}{index}. {PROMPTS[(index * 5) % len(PROMPTS)]}"


def request_for(server: str, index: int, cls: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The body and headers each server understands for a class; vLLM FCFS gets none (it rejects a
    non-zero priority), ours also gets no-store so its response cache stays out of the way. A seed
    per index where `SEEDED`: sampled answers end (at the end-of-text token) at different lengths,
    and unseeded that alone moved tok/s between two servers given the same requests by 2-3 %. Not
    on vLLM: its CPU build's engine dies on a seeded request whose prompt it prefills in parts."""
    body: dict[str, Any] = {
        "model": MODEL_NAME,
        "messages": [{"role": "user", "content": prompt_for(index)}],
        "max_tokens": MAX_TOKENS,
        "temperature": TEMPERATURE,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if SEEDED["on"]:
        body["seed"] = SEED_BASE + index
    if server == "vllm-priority":
        body["priority"] = VLLM_PRIORITY[cls]
    headers = {"X-Priority": cls, **NO_STORE} if server == "ours" else {}
    return body, headers


def new_client(url: str) -> httpx.AsyncClient:
    """One shared client with no connection limit. At a few to tens of req/s, each request lasting
    seconds, the pool's bookkeeping is negligible (the collapse bench/clients.py warns about appears
    at hundreds of req/s); a client per request would load the TLS certificate store each time, tens
    of milliseconds of CPU on a 2-core machine the server needs."""
    import httpx

    return httpx.AsyncClient(
        base_url=url,
        timeout=httpx.Timeout(CLIENT_TIMEOUT_S),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
    )
