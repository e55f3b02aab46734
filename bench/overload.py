"""Overload soak: far past capacity, is every request the door accepts served? On the simulator
(8 slots, 20 ms a token, 32-token answers: about 12.5 req/s), open-loop Poisson arrivals, half of
them streaming, in three scenarios:

  * thirds-5x: 61 req/s for 30 s, a third each high, medium and low (the high class alone is over
    capacity), the load issue 27 was filed with;
  * thirds-10x: 125 req/s, the same mix;
  * high20-3x: 37.5 req/s, 20 % high (the high class fits, the total does not).

    .venv/bin/python bench/overload.py             # about 2 minutes
    .venv/bin/python bench/overload.py --quick     # 10 s per scenario
    .venv/bin/python bench/overload.py --scenarios thirds-10x --duration 60

Per class: sent, served, refused (429 with Retry-After, by reason), and accepted then failed (a 200
followed by an error or no end); high-class first-token times of the served streams. The server's
own count, `gptoss_requests_accepted_then_failed_total`, is read from /metrics after each run. A
benchmark: exit 0 unless something failed to run.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root first: see bench/common.py

from bench.clients import stream_chat  # noqa: E402
from bench.common import NO_STORE, Progress, Stats, git_head, note, stop_on_sigterm, table  # noqa: E402
from bench.servers import app_argv, free_port, running_server  # noqa: E402

CAPACITY_REQ_S = 8 / (32 * 0.020)
SETTINGS = [
    "engine.backend=sim",
    "engine.sim.token_latency_ms=20",
    "engine.sim.prefill_ms_per_token=0",
    "scheduler.max_concurrency=8",
    "logging.file=",
]
SCENARIOS = {"thirds-5x": (61.0, (1, 1, 1)), "thirds-10x": (125.0, (1, 1, 1)), "high20-3x": (37.5, (20, 50, 30))}
CLASSES = ("high", "medium", "low")


@dataclass
class Outcome:
    cls: str
    status: int
    code: str | None  # the refusal's or the failure's error code; None when served
    retry_after: bool = False
    ttft_s: float | None = None


async def one(client, cls: str, stream: bool) -> Outcome:
    body = {
        "model": "sim",
        "messages": [{"role": "user", "content": f"overload {random.random()}"}],
        "max_tokens": 32,
        "stream": stream,
    }
    headers = {"X-Priority": cls, **NO_STORE}
    if stream:
        body["stream_options"] = {"include_usage": True}
        r = await stream_chat(client, body, headers, timeout_s=300)
        if r.status != 200:
            return Outcome(cls, r.status, r.error_code or r.error_kind, "retry-after" in r.headers)
        return Outcome(cls, 200, None if r.ok else (r.error_code or r.error_kind), ttft_s=r.ttft_s)
    response = await client.post("/v1/chat/completions", json=body, headers=headers)
    code = None if response.status_code == 200 else response.json()["error"]["code"]
    return Outcome(cls, response.status_code, code, "retry-after" in response.headers)


async def run_scenario(url: str, rate: float, weights: tuple[int, ...], seconds: float, seed: int) -> list[Outcome]:
    import httpx

    rng = random.Random(seed)
    progress = Progress(f"{rate:g} req/s", float(seconds), "s")
    start = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=httpx.Limits(max_connections=None)) as client:
        tasks = []
        while (elapsed := time.perf_counter() - start) < seconds:
            cls = rng.choices(CLASSES, weights=weights)[0]
            tasks.append(asyncio.create_task(one(client, cls, stream=rng.random() < 0.5)))
            progress.update(round(elapsed, 1), f"sent={len(tasks)}")
            await asyncio.sleep(rng.expovariate(rate))
        progress.done()
        return await asyncio.gather(*tasks)


async def accepted_then_failed(url: str) -> dict[str, int]:
    import httpx

    async with httpx.AsyncClient(base_url=url) as client:
        text = (await client.get("/metrics")).text
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith("gptoss_requests_accepted_then_failed_total{"):
            labels, value = line.rsplit(" ", 1)
            counts[labels[labels.index("{") :]] += int(float(value))
    return dict(counts)


def report(name: str, rate: float, outcomes: list[Outcome], server_count: dict[str, int]) -> str:
    rows = []
    for cls in CLASSES:
        mine = [o for o in outcomes if o.cls == cls]
        refused = [o for o in mine if o.status != 200]
        failed = [o for o in mine if o.status == 200 and o.code is not None]
        reasons = Counter(o.code for o in refused)
        ttft = Stats.of([o.ttft_s for o in mine if o.status == 200 and o.code is None and o.ttft_s is not None])
        rows.append(
            [
                cls,
                len(mine),
                len(mine) - len(refused) - len(failed),
                len(refused),
                sum(o.status == 429 and o.retry_after for o in refused),
                ", ".join(f"{k} {v}" for k, v in reasons.most_common()) or "-",
                len(failed),
                ", ".join(f"{k} {v}" for k, v in Counter(o.code for o in failed).items()) or "-",
                f"{ttft.p50:.2f}",
                f"{ttft.p99:.2f}",
            ]
        )
    notes = [f"server's gptoss_requests_accepted_then_failed_total: {server_count or 'none'}"]
    return table(
        f"{name}: {rate:g} req/s, {rate / CAPACITY_REQ_S:.1f}x capacity",
        [
            "class",
            "sent",
            "served",
            "refused",
            "429+Retry-After",
            "refusals by reason",
            "accepted, failed",
            "failures",
            "TTFT p50 s",
            "TTFT p99 s",
        ],
        rows,
        notes,
    )


async def main_async(args: argparse.Namespace) -> None:
    print(f"bench/overload.py  commit {git_head()}  capacity about {CAPACITY_REQ_S:.1f} req/s")
    for name in args.scenarios.split(","):
        rate, weights = SCENARIOS[name]
        port = free_port()
        note(f"{name}: a fresh server on port {port}")
        with running_server("ours", app_argv(port, [*SETTINGS, *args.set]), port) as server:
            outcomes = await run_scenario(server.url, rate, weights, args.duration, args.seed)
            print(report(name, rate, outcomes, await accepted_then_failed(server.url)), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 s per scenario")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"from {','.join(SCENARIOS)}")
    parser.add_argument("--duration", type=float, default=None, help="seconds of arrivals per scenario (30)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a server setting")
    args = parser.parse_args()
    args.duration = args.duration or (10.0 if args.quick else 30.0)
    stop_on_sigterm()
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
