"""Scheduler benchmark: queue policy cost at 10,000 waiters, and the HTTP layer's added latency.

    .venv/bin/python bench/scheduler.py            # about 1-2 minutes on 2 cores
    .venv/bin/python bench/scheduler.py --quick    # a few seconds, a smoke run
    .venv/bin/python bench/scheduler.py --skip-http / --skip-queue

Part 1 (in process, bench/queue_cost.py):
  * PriorityQueue.push / pop with 10,000 requests of mixed classes queued: each operation timed on
    its own with time.perf_counter_ns at that steady size (push one, pop one), p50 and mean.
  * The real Scheduler over a zero-latency SimEngine with few slots, so the queue holds 10,000:
    Scheduler.submit per request, and the scheduler's dispatch path (peek, admission check, pop,
    start the engine task) per dispatched request.
Part 2 (over HTTP, server in its own process so the client does not share its CPU/GIL):
  * `python app.py` with a zero-latency simulator, against a bare FastAPI/uvicorn endpoint started
    the same way (`python bench/scheduler.py --baseline-server PORT`) that returns a similar
    chat.completion body; non-streaming, max_tokens=1, async httpx client at concurrency 1, 8, 32.
    Added latency = ours minus baseline at concurrency 1.

A benchmark, not a test: it prints tables and a PASS/MISS summary, and always exits 0 unless
something failed to run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root first: see bench/common.py

# FastAPI resolves the baseline endpoint's (string) annotations in this module's globals.
from starlette.requests import Request as StarletteRequest  # noqa: E402

from bench.clients import LoadResult, load_row, repeat_load  # noqa: E402
from bench.common import SIM_SERVER_SETTINGS, Stats, note, table  # noqa: E402
from bench.queue_cost import run_part1  # noqa: E402
from bench.servers import app_argv, free_port, running_server  # noqa: E402

ADDED_P50_TARGET_MS = 2.0
CONCURRENCIES = (1, 8, 32)
SERVER_SETTINGS = SIM_SERVER_SETTINGS


# ----------------------------------------------------------------------------- part 2: HTTP


def baseline_app():  # noqa: ANN201 - FastAPI imported lazily
    """The least a FastAPI endpoint can do for this route: read the JSON, answer a similar body."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI(title="baseline")

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @app.post("/v1/chat/completions")
    async def chat(request: StarletteRequest) -> JSONResponse:
        body = await request.json()
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        prompt_tokens = sum(len(str(m.get("content", "")).split()) + 4 for m in body.get("messages", [])) + 1
        return JSONResponse(
            {
                "id": request_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model") or "sim",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "the"},
                        "logprobs": None,
                        "finish_reason": "length",
                    }
                ],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1},
            },
            headers={"X-Request-ID": request_id},
        )

    return app


def run_baseline_server(port: int) -> int:
    import uvicorn

    # Started the way app.py starts its server: same uvicorn.Config knobs, asyncio loop, h11/httptools
    config = uvicorn.Config(
        baseline_app(), host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=5
    )
    uvicorn.Server(config).run()
    return 0


PAYLOAD = {
    "model": "sim",
    "messages": [{"role": "user", "content": "Say hello in one word."}],
    "max_tokens": 1,
    "temperature": 0,
}


def run_part2(args: argparse.Namespace, summary: list[list[object]]) -> None:
    warmup = 0.3 if args.quick else 0.5
    duration = 1.0 if args.quick else 8.0
    rounds = 1 if args.quick else 4
    note("Part 2: HTTP, server in its own process, async httpx client")
    ours_port, base_port = free_port(), free_port()
    ours_argv = app_argv(ours_port, SERVER_SETTINGS)
    base_argv = [sys.executable, str(Path(__file__).resolve()), "--baseline-server", str(base_port)]
    results: dict[tuple[str, int], LoadResult] = {}
    with running_server("ours", ours_argv, ours_port) as ours, running_server("baseline", base_argv, base_port) as base:
        servers = [("baseline", base), ("ours", ours)]
        for c in CONCURRENCIES:
            # Rounds alternate the order (B, O, O, B, ...) so drift hits both sides alike.
            for rnd in range(rounds):
                order = servers if rnd % 2 == 0 else servers[::-1]
                for name, server in order:
                    label = f"{name} c={c} round {rnd + 1}/{rounds}"
                    r = asyncio.run(
                        repeat_load(server.url, server.pid, PAYLOAD, {}, c, warmup, duration / rounds, label)
                    )
                    results.setdefault((name, c), LoadResult()).merge(r)

    rows = []
    stats: dict[tuple[str, int], Stats] = {}
    cpu: dict[tuple[str, int], float | None] = {}
    for c in CONCURRENCIES:
        for name in ("baseline", "ours"):
            row, stats[(name, c)], cpu[(name, c)] = load_row(name, c, results[(name, c)])
            rows.append(row)
        o, b = stats[("ours", c)], stats[("baseline", c)]
        co, cb = cpu[("ours", c)], cpu[("baseline", c)]
        rows.append(
            [
                "  added (ours - baseline)",
                c,
                "",
                "",
                "",
                f"{o.p50 - b.p50:+.2f}",
                f"{o.p99 - b.p99:+.2f}",
                f"{o.mean - b.mean:+.2f}",
                "",
                f"{co - cb:+,.0f}" if co is not None and cb is not None else "",
                "",
            ]
        )
    errors = [f"{name} c={c}: {r.error_sample}" for (name, c), r in results.items() if r.error_sample]
    print()
    print(
        table(
            "HTTP: non-streaming chat completions, max_tokens=1 (latency in milliseconds, client-measured)",
            [
                "server",
                "conc",
                "requests",
                "errors",
                "req/s",
                "p50 ms",
                "p99 ms",
                "mean ms",
                "max ms",
                "srv cpu us/req",
                "client cpu",
            ],
            rows,
            [
                f"ours: python app.py {' '.join('--set ' + s for s in SERVER_SETTINGS)}",
                "baseline: bare FastAPI endpoint (parse JSON, return a chat.completion body) under the same uvicorn",
                f"{duration:g}s measured per cell after {warmup:g}s warm-up, in {rounds} alternating round(s); "
                f"client and servers share {os.cpu_count()} CPUs; client cpu near 100% means req/s is client-bound "
                "(httpx costs more CPU per request than either server)",
                "srv cpu us/req: server process CPU time (/proc) over the measured window / requests answered",
                *(f"first error: {e}" for e in errors),
            ],
        )
    )
    o, b = stats[("ours", 1)], stats[("baseline", 1)]
    added_p50, added_p99 = o.p50 - b.p50, o.p99 - b.p99
    summary.append(
        [
            "HTTP added p50 @ concurrency 1",
            f"< {ADDED_P50_TARGET_MS:g} ms",
            f"{added_p50:.2f} ms",
            "PASS" if added_p50 < ADDED_P50_TARGET_MS else "MISS",
        ]
    )
    summary.append(["HTTP added p99 @ concurrency 1", "(info)", f"{added_p99:.2f} ms", "-"])
    total_errors = sum(r.errors for r in results.values())
    summary.append(["HTTP errors (all cells)", "0", str(total_errors), "PASS" if total_errors == 0 else "MISS"])


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/scheduler.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a short run of a few seconds")
    p.add_argument("--skip-queue", action="store_true", help="skip part 1 (queue policy, in process)")
    p.add_argument("--skip-http", action="store_true", help="skip part 2 (HTTP servers)")
    p.add_argument("--baseline-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.baseline_server is not None:
        return run_baseline_server(args.baseline_server)
    import uvicorn

    started = time.monotonic()
    print(
        f"bench/scheduler.py  mode={'quick' if args.quick else 'full'}  python {platform.python_version()}  "
        f"uvicorn {uvicorn.__version__}  cpus={os.cpu_count()}  {platform.machine()}"
    )
    summary: list[list[object]] = []
    if not args.skip_queue:
        run_part1(args, summary)
    if not args.skip_http:
        run_part2(args, summary)
    print()
    print(
        table(
            "Summary",
            ["target", "goal", "measured", "result"],
            summary,
            [f"total run time {time.monotonic() - started:.1f}s"],
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
