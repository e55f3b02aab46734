"""Open-loop load benchmark: under Poisson load at and beyond capacity, do more requests get on-time
answers through our server than through the engine's own server (same model, machine and KV size)?

    .venv/bin/python bench/load.py                      # full run: 3 loads x 3 servers, each calibrated
    .venv/bin/python bench/load.py --engine llamacpp    # ours on llama.cpp against llama.cpp's own server
    .venv/bin/python bench/load.py --quick              # a few minutes: loads 1.0,1.5, 20 s each
    .venv/bin/python bench/load.py --servers ours,vllm-fcfs --loads 1.5 --duration 30
    .venv/bin/python bench/load.py --json docs/bench/load.json --markdown docs/BENCHMARKS.md

Servers, all started before anything is measured (an idle one holds memory, not CPUs), each in
its own process group:
  * vllm-fcfs: `python -m vllm.entrypoints.openai.api_server` with the bundled model, max_num_seqs 128;
  * vllm-priority: the same with `--scheduling-policy priority` (high sent as priority 0, low as 1);
  * ours: `python app.py` with its defaults (class sent as `X-Priority`).
With `--engine llamacpp`: `llama.cpp` (bench/llamacpp_server.py, llama.cpp's own server from the
same xllamacpp build) and ours on `engine.backend=llamacpp`, both with 32 slots sharing 16,384 KV
tokens; calibration then runs on llama.cpp's server. With vLLM, all three get the same KV cache size: engine.kv_size.default_cpu_kv_bytes(), computed once here and
passed to vLLM (--kv-cache-memory-bytes) and to ours (--set engine.vllm.kv_cache_memory_bytes), so
memory freed or taken between the starts cannot give them different sizes.

Per load level and server: (1) a closed-loop calibration against vllm-fcfs (bench/calibration.py)
finds C_slo, the req/s at which vLLM's median time per output token reaches the objective (0.1 s),
just before the run since this machine's speed drifts by up to 4x over minutes; (2) open-loop
Poisson arrivals at the level x C_slo for --duration s, the same unit-rate draws of (arrival,
class, prompt) for every run (bench/load_requests.py, sent by bench/open_loop.py); (3) every
second, the server tree's RSS and its queue length are sampled (bench/load_samples.py).
bench/load_records.py holds what is recorded; bench/load_report.py turns the records into tables,
PASS/MISS targets, Markdown and plots; docs/BENCHMARKS.md explains them.

A benchmark, not a test: exit 0 unless something failed to run (1), 130 on Ctrl-C. Servers are
always stopped (SIGINT, then SIGKILL to the process group).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root first: see bench/common.py

from bench.calibration import Calibration, calibrate  # noqa: E402
from bench.clients import stream_chat  # noqa: E402
from bench.common import (  # noqa: E402
    MODEL_DIR,
    MODEL_NAME,
    OFFLINE_ENV,
    Progress,
    ensure_model,
    git_head,
    note,
    stop_on_sigterm,
    timed_sleep,
)
from bench.load_records import Run, high_alone, to_record  # noqa: E402
from bench.load_requests import (  # noqa: E402
    CLIENT_TIMEOUT_S,
    HIGH_SHARE,
    MAX_TOKENS,
    SEEDED,
    TEMPERATURE,
    Planned,
    fresh_prompts,
    make_plan,
    new_client,
    request_for,
)
from bench.load_samples import sample_forever, until_idle  # noqa: E402
from bench.machine import available_gib, machine_stalls  # noqa: E402
from bench.open_loop import drain_answers, send_on_schedule  # noqa: E402
from bench.servers import ServerProcess, app_argv, free_port, venv_python, vllm_dtype_args  # noqa: E402

SERVERS = ("vllm-fcfs", "vllm-priority", "ours", "llama.cpp")
BASELINE = {"vllm": "vllm-fcfs", "llamacpp": "llama.cpp"}  # the server C_slo is calibrated on
LLAMACPP_SLOTS, LLAMACPP_KV = 32, 16384
MIN_AVAILABLE_GIB = 4.0  # per server, all up at once: ~2.5 GB plus its KV cache


@dataclass
class Mode:
    levels: tuple[int, ...]  # calibration concurrencies
    calibration_s: float
    loads: tuple[float, ...]
    duration_s: float
    settle_s: float


FULL = Mode((8, 16, 24, 32, 48), 6.0, (0.7, 1.0, 1.5), 60.0, 10.0)
QUICK = Mode((8, 16, 32), 4.0, (1.0, 1.5), 20.0, 3.0)


# ----------------------------------------------------------------------------- servers


def server_process(name: str, engine: str, kv_bytes: int, ours_set: list[str]) -> ServerProcess:
    py, port = venv_python(), free_port()
    if name == "ours":
        engine_settings = (
            [
                f"engine.backend={engine}",
                f"engine.llamacpp.n_parallel={LLAMACPP_SLOTS}",
                f"engine.llamacpp.kv_tokens={LLAMACPP_KV}",
            ]
            if engine == "llamacpp"
            else ["engine.backend=vllm", f"engine.vllm.kv_cache_memory_bytes={kv_bytes}"]
        )
        settings = ["logging.file=", *engine_settings, *ours_set]
        return ServerProcess(name, app_argv(port, settings, py), port, "/healthz", OFFLINE_ENV, log_prefix="bench-load")
    if name == "llama.cpp":
        argv = [
            py,
            "bench/llamacpp_server.py",
            "--port",
            str(port),
            "--slots",
            str(LLAMACPP_SLOTS),
            "--kv-tokens",
            str(LLAMACPP_KV),
        ]
        return ServerProcess(name, argv, port, "/health", OFFLINE_ENV, log_prefix="bench-load")
    argv = [
        py,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        MODEL_DIR,
        "--served-model-name",
        MODEL_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "2048",
        "--enforce-eager",
        "--kv-cache-memory-bytes",
        str(kv_bytes),
        "--max-num-seqs",
        "128",
        *vllm_dtype_args(),
    ]
    if name == "vllm-priority":
        argv += ["--scheduling-policy", "priority"]
    return ServerProcess(name, argv, port, "/health", OFFLINE_ENV, log_prefix="bench-load")


def start(name: str, engine: str, kv_bytes: int, ours_set: list[str]) -> ServerProcess:
    server = server_process(name, engine, kv_bytes, ours_set)
    note(f"starting {name} on :{server.port} (about 20-60 s) ...")
    server.start()
    try:
        server.wait_ready(step_s=0.5, progress=True)
        asyncio.run(warm_up(server))
    except BaseException:
        server.stop()
        raise
    return server


async def warm_up(server: ServerProcess) -> None:
    """Four requests together, not recorded: first requests after a start pay for lazy paths."""
    fresh_prompts()
    async with new_client(server.url) as client:
        results = await asyncio.gather(
            *(stream_chat(client, *request_for(server.name, -1 - i, "high"), 60) for i in range(4))
        )
    failed = [r.error for r in results if r.error]
    if failed:
        raise RuntimeError(f"{server.name} warm-up failed: {failed[0]}")


# ----------------------------------------------------------------------------- open loop


async def run_load(
    server: ServerProcess,
    load: float,
    capacity: float,
    duration_s: float,
    seed: int,
    settle_s: float,
    until_quiet: bool = True,
    only: str | None = None,
) -> Run:
    """Send the plan on time whatever happens to earlier requests, wait for every answer (each at
    most CLIENT_TIMEOUT_S), then let the server settle; sample it every second throughout. Then,
    `until_quiet`, wait until it is idle, so the next run, on another server, gets quiet cores.
    `only` sends just that class's requests of the plan, at their times: what it gets alone."""
    run = Run(server.name, load, load * capacity, duration_s, capacity)
    fresh_prompts()
    rate = run.rate
    plan = [p for p in make_plan(seed, rate, duration_s) if only in (None, p.cls)]
    with machine_stalls() as run.stalls_s:
        async with new_client(server.url) as client:
            t0 = time.perf_counter()
            sampler = asyncio.create_task(sample_forever(server, client, run, t0))

            async def one(p: Planned) -> None:
                result = await stream_chat(client, *request_for(server.name, p.index, p.cls), CLIENT_TIMEOUT_S)
                run.records.append(to_record(p, result, t0))

            label = f"{server.name} {load:g}x ({rate:.2f} req/s)"
            tasks = await send_on_schedule(plan, t0, one, Progress(f"{label} sending", len(plan), "req"))
            await drain_answers(tasks, Progress(f"{label} answers", len(tasks), "req"))
            await timed_sleep(f"{label} settling", settle_s)
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
            if until_quiet:
                await until_idle(server, client)
    run.records.sort(key=lambda r: r.index)
    run.crashed = not server.alive() or any(not s.alive for s in run.samples)
    return run


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/load.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a few minutes: short calibration, loads 1.0,1.5, 20 s each")
    p.add_argument(
        "--engine",
        choices=tuple(BASELINE),
        default="vllm",
        help="the engine under every server (default vllm; llamacpp: ours against llama.cpp's server)",
    )
    p.add_argument(
        "--servers",
        help="comma-separated, from "
        + ",".join(SERVERS)
        + " (default vllm-fcfs,vllm-priority,ours; with --engine llamacpp llama.cpp,ours)",
    )
    p.add_argument("--loads", help="load levels as multiples of C_slo (default 0.7,1.0,1.5; quick 1.0,1.5)")
    p.add_argument("--duration", type=float, help="seconds of sending per load level (default 60, quick 20)")
    p.add_argument("--calibration-s", type=float, help="measured seconds per calibration level (default 6, quick 4)")
    p.add_argument("--capacity", type=float, metavar="REQ_S", help="use this C_slo for every run and skip calibration")
    p.add_argument("--seed", type=int, default=1, help="seed of the arrival/class sequence (default 1)")
    p.add_argument("--slo-tpot", type=float, default=0.1, help="time-per-output-token objective, s (default 0.1)")
    p.add_argument("--slo-ttft", type=float, default=1.0, help="first-token promise for high, s (default 1)")
    p.add_argument("--low-promise", type=float, default=60.0, help="first-token promise for low, s (default 60)")
    p.add_argument(
        "--ours-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for our server, passed as --set (repeatable)",
    )
    p.add_argument(
        "--high-alone",
        default="",
        metavar="LOADS",
        help="at these levels (e.g. 5), also send the level's high requests alone to the engine's own server, "
        "right after ours' run of the level: what high alone gets on the machine as it is then (#40's target at 5x)",
    )
    p.add_argument(
        "--only",
        choices=("high", "low"),
        help="send only this class's requests of each level's plan, at their times (#40's 'what high alone could get')",
    )
    p.add_argument("--json", metavar="PATH", help="write every request record and summary as JSON")
    p.add_argument(
        "--markdown",
        metavar="PATH",
        help="write the result tables as Markdown (a file with the "
        "results markers, e.g. docs/BENCHMARKS.md, gets only the part between them replaced)",
    )
    p.add_argument("--plots", default="docs/bench", metavar="DIR", help="PNG plots go here ('' for none)")
    p.add_argument("--from-json", metavar="PATH", help="run nothing: report again from a --json file")
    args = p.parse_args(argv)
    default = "llama.cpp,ours" if args.engine == "llamacpp" else "vllm-fcfs,vllm-priority,ours"
    SEEDED["on"] = args.engine == "llamacpp"
    args.servers = [s.strip() for s in (args.servers or default).split(",") if s.strip()]
    unknown = set(args.servers) - set(SERVERS)
    if unknown or not args.servers:
        p.error(f"--servers: unknown {', '.join(sorted(unknown)) or '(none given)'}; choose from {','.join(SERVERS)}")
    mode = QUICK if args.quick else FULL
    args.loads = tuple(float(x) for x in args.loads.split(",")) if args.loads else mode.loads
    args.high_alone = tuple(float(x) for x in args.high_alone.split(",") if x.strip())
    args.duration = args.duration or mode.duration_s
    args.calibration_s = args.calibration_s or mode.calibration_s
    args.levels, args.settle_s = mode.levels, mode.settle_s
    # ours is held to the objectives it is judged by (an --ours-set given later overrides them)
    args.ours_set = [f"scheduler.slo.tpot_s={args.slo_tpot}", f"scheduler.slo.ttft_s={args.slo_ttft}", *args.ours_set]
    return args


def measure(args: argparse.Namespace, kv_bytes: int, calibrations: list[Calibration], runs: list[Run]) -> None:
    """Every server started once (an idle one holds memory, not CPUs), then level by level each
    server in turn, the order rotated from one level to the next, each run offered its multiple of
    the C_slo calibrated on vLLM FCFS just before it. This machine's speed drifts by up to 4x over
    minutes (C_slo 1.09-4.29 req/s within one run): one calibration per level made 1.5x an
    underload for a server run three minutes after it, and 0.7x an overload. A server that died
    during a level is restarted for the next one; the death is recorded. A level's highs alone
    (`--high-alone`) run on the engine's own server right after ours' run of the level. Appends to
    `calibrations` and `runs` as it goes, so an interrupted run still reports the levels it finished."""
    names = list(args.servers)
    baseline = BASELINE[args.engine]
    if (args.capacity is None or args.high_alone) and baseline not in names:  # calibration, high alone
        names.insert(0, baseline)
    reference = "ours" if "ours" in args.servers else args.servers[-1]  # the highs alone run right after it
    servers: dict[str, ServerProcess] = {}
    try:
        for name in names:
            servers[name] = start(name, args.engine, kv_bytes, args.ours_set)
        for i, load in enumerate(args.loads):
            for name in args.servers[i % len(args.servers) :] + args.servers[: i % len(args.servers)]:
                capacity = args.capacity
                if capacity is None:
                    calibrations.append(calibration := calibrate_for(load, name, servers[baseline], args))
                    capacity = calibration.c_slo
                server = servers[name]
                run = run_load(server, load, capacity, args.duration, args.seed, args.settle_s, only=args.only)
                runs.append(asyncio.run(run))
                if not server.alive():
                    server.failed = True  # keeps its log
                    note(f"{name} died during load {load:g} (log: {server.log.name})")
                    server.stop()
                    if load != args.loads[-1]:
                        servers[name] = start(name, args.engine, kv_bytes, args.ours_set)
                if load in args.high_alone and name == reference and servers[baseline].alive():
                    runs.append(alone_run(servers[baseline], load, capacity, args))
    finally:
        for server in servers.values():
            server.stop()


def alone_run(server: ServerProcess, load: float, capacity: float, args: argparse.Namespace) -> Run:
    """The level's highs alone on the engine's own server, at the same times as in ours' run and
    right after it: the machine's speed drifts over minutes (the same 80 highs alone on vLLM's CPU
    build got 8 to 61 on time within one session), and the vLLM servers' runs at 5x take minutes."""
    run = asyncio.run(run_load(server, load, capacity, args.duration, args.seed, args.settle_s, only="high"))
    run.server = high_alone(server.name)
    return run


def calibrate_for(load: float, name: str, server: ServerProcess, args: argparse.Namespace) -> Calibration:
    note(f"calibration for {name} {load:g}x: closed loop at concurrency {', '.join(map(str, args.levels))}")
    with machine_stalls() as stalls:
        calibration = asyncio.run(calibrate(server, args.levels, args.calibration_s, args.slo_tpot))
    calibration.load, calibration.server, calibration.stalls_s = load, name, stalls
    note(f"C_slo = {calibration.c_slo:.2f} req/s")
    return calibration


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop_on_sigterm()
    import httpx

    from bench import load_report
    from engine.kv_size import default_cpu_kv_bytes

    if args.from_json:
        load_report.report(*load_report.read_json(Path(args.from_json)), args)
        return 0
    started = time.monotonic()
    kv_bytes = default_cpu_kv_bytes()
    meta = {
        "commit": git_head(),
        "python": platform.python_version(),
        "httpx": httpx.__version__,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "kv_cache_bytes": kv_bytes,
        "mode": "quick" if args.quick else "full",
        "engine": args.engine,
        "seed": args.seed,
        "duration_s": args.duration,
        "loads": list(args.loads),
        "servers": args.servers,
        "ours_set": args.ours_set,
        "slo": {"tpot_s": args.slo_tpot, "ttft_high_s": args.slo_ttft, "ttft_low_s": args.low_promise},
        "max_tokens": MAX_TOKENS,
        "temperature": TEMPERATURE,
        "high_share": HIGH_SHARE,
        "only": args.only,
        "high_alone": list(args.high_alone),
    }
    print(
        "bench/load.py  "
        + "  ".join(f"{k}={meta[k]}" for k in ("mode", "commit", "python", "cpus", "machine"))
        + f"  kv={kv_bytes / 2**20:.0f}MiB",
        flush=True,
    )
    extra = {BASELINE[args.engine]} if args.capacity is None or args.high_alone else set()
    needed = MIN_AVAILABLE_GIB * len(set(args.servers) | extra)
    if available_gib() < needed:
        note(f"error: {available_gib():.1f} GiB of memory available; the servers need about {needed:g} GiB")
        return 1
    calibrations: list[Calibration] = []
    runs: list[Run] = []
    code = 0
    try:
        if args.engine == "vllm":
            ensure_model()
        measure(args, kv_bytes, calibrations, runs)
    except KeyboardInterrupt:
        note(f"interrupted; servers stopped; reporting the {len(runs)} runs finished")
        code = 130
    except RuntimeError as exc:
        note(f"error: {exc}")
        return 1
    meta["run_s"] = round(time.monotonic() - started, 1)
    if runs:
        load_report.report(meta, calibrations, runs, args)
    return code


if __name__ == "__main__":
    sys.exit(main())
