"""One real vLLM server behind the gateway (`engine.backend: openai`): what the hop costs, and
whether what the gateway relies on holds against vLLM's own server rather than our simulator
stand-in (bench/cluster.py): prompt tokens counted by vLLM's /tokenize, a client that leaves
aborting vLLM's sequence.

    .venv/bin/python bench/cluster_vllm.py                      # about 4 minutes on 2 cores
    .venv/bin/python bench/cluster_vllm.py --markdown docs/BENCHMARKS.md

vLLM's server as bench/load.py starts it (same model, KV size, `--scheduling-policy priority`), then
a gateway in front of it, both on this machine. (1) Closed loop at --concurrency, first straight
to vLLM, then through the gateway (its running limit fixed at the same number, so it adds the hop
and nothing else): req/s, tok/s, TTFT and TPOT. (2) Prompt tokens of a few prompts, direct and
through the gateway. (3) --concurrency streams through the gateway, closed after their first
token: vLLM's `vllm:num_requests_running` must fall to 0.

A benchmark, not a test: exit 0 unless something failed to run (1), 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root first: see bench/common.py

from bench.calibration import Level, level_of  # noqa: E402
from bench.clients import StreamResult, stream_chat  # noqa: E402
from bench.common import MODEL_NAME, ensure_model, git_head, note, stop_on_sigterm, timed_sleep  # noqa: E402
from bench.load import start  # noqa: E402
from bench.load_requests import CLIENT_TIMEOUT_S, new_client, request_for  # noqa: E402
from bench.open_loop import metric_sum  # noqa: E402
from bench.report import Table, check_row, ms, num, write_section  # noqa: E402
from bench.servers import ServerProcess, app_argv, free_port, venv_python  # noqa: E402
from engine.kv_size import default_cpu_kv_bytes  # noqa: E402

SECTION = "## Cluster on vLLM (`bench/cluster_vllm.py`)"
HOP_TARGET = 0.9  # gateway throughput against vLLM straight, same machine


def gateway_process(upstream: ServerProcess, concurrency: int) -> ServerProcess:
    port = free_port()
    settings = [
        "server.ui=false",
        "monitor.gpu=false",
        "logging.file=",
        "cache.enabled=false",
        "engine.backend=openai",
        f"engine.openai.upstreams=[{upstream.url}/v1]",
        "scheduler.limit.adaptive=false",
        f"scheduler.max_concurrency={concurrency}",
    ]
    return ServerProcess("gateway", app_argv(port, settings, venv_python()), port, log_prefix="bench-cluster-vllm")


async def closed_loop(url: str, server: str, concurrency: int, measure_s: float) -> Level:
    done: list[StreamResult] = []
    begin = time.perf_counter() + measure_s / 3

    async def worker() -> None:
        while True:
            body, headers = request_for(server, len(done), "low")
            done.append(await stream_chat(client, body, headers, CLIENT_TIMEOUT_S))

    async with new_client(url) as client:
        workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
        await timed_sleep(f"{server}, closed loop at {concurrency}", measure_s * 4 / 3)
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    return level_of(concurrency, [r for r in done if r.ok and r.sent >= begin])


async def prompt_tokens(url: str) -> list[int]:
    async with new_client(url) as client:
        out = []
        for i in range(4):
            body, _ = request_for("vllm-fcfs", i * 7, "low")
            body.update(stream=False, max_tokens=1)
            body.pop("stream_options")
            out.append((await client.post("/v1/chat/completions", json=body)).json()["usage"]["prompt_tokens"])
        return out


async def abort_check(gateway: str, vllm: str, concurrency: int) -> tuple[float, float]:
    """(vLLM's running sequences with the streams open, seconds until it ran none after they closed)."""
    leave = asyncio.Event()
    async with new_client(gateway) as client, new_client(vllm) as upstream:

        async def until_told(i: int, streaming: asyncio.Event) -> None:
            body, headers = request_for("ours", 900 + i, "low")
            body["max_tokens"] = 1500
            async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
                async for line in response.aiter_lines():
                    if '"content"' in line:
                        streaming.set()
                        await leave.wait()
                        return  # the stream closes

        async def running() -> float:
            return metric_sum((await upstream.get("/metrics")).text, "vllm:num_requests_running")

        started = [asyncio.Event() for _ in range(concurrency)]
        tasks = [asyncio.create_task(until_told(i, e)) for i, e in enumerate(started)]
        await asyncio.gather(*(e.wait() for e in started))
        await asyncio.sleep(2.0)  # vLLM's gauges catch up
        before = await running()
        leave.set()
        await asyncio.gather(*tasks)
        closed = time.perf_counter()
        while await running() > 0 and time.perf_counter() - closed < 30:
            await asyncio.sleep(0.1)
        return before, time.perf_counter() - closed


def measure(args: argparse.Namespace) -> list[Table]:
    ensure_model()
    vllm = start("vllm-priority", default_cpu_kv_bytes(), [])
    try:
        direct = asyncio.run(closed_loop(vllm.url, "vllm-priority", args.concurrency, args.duration))
        gateway = gateway_process(vllm, args.concurrency)
        gateway.start()
        try:
            gateway.wait_ready(step_s=0.2)
            through = asyncio.run(closed_loop(gateway.url, "ours", args.concurrency, args.duration))
            counted = asyncio.run(prompt_tokens(gateway.url)), asyncio.run(prompt_tokens(vllm.url))
            running_before, abort_s = asyncio.run(abort_check(gateway.url, vllm.url, args.concurrency))
        finally:
            gateway.stop()
    finally:
        vllm.stop()
    return tables(args, direct, through, counted, running_before, abort_s)


def tables(
    args: argparse.Namespace,
    direct: Level,
    through: Level,
    counted: tuple[list[int], list[int]],
    running_before: float,
    abort_s: float,
) -> list[Table]:
    rows: list[list[Any]] = [
        [name, lv.completed, num(lv.rps), num(lv.tok_s, ".0f"), ms(lv.ttft_p50_s), num(lv.tpot_p50_s, ".3f")]
        for name, lv in (("vLLM straight", direct), ("through the gateway", through))
    ]
    hop = Table(
        f"Closed loop at {args.concurrency}, {MODEL_NAME} on vLLM's CPU build",
        ["path", "requests", "req/s", "tok/s", "TTFT p50 ms", "TPOT p50 s"],
        rows,
        ["req/s = concurrency / mean E2E over the last three quarters of the level (Little's law)"],
    )
    ratio = through.tok_s / direct.tok_s if direct.tok_s else float("nan")
    check = Table(
        "Targets",
        ["target", "goal", "measured", "result"],
        [
            check_row("gateway tok/s vs vLLM straight", f">= {HOP_TARGET}x", f"{ratio:.2f}x", ratio >= HOP_TARGET),
            check_row(
                "prompt tokens through the gateway",
                "= vLLM's own count",
                f"{counted[0]} vs {counted[1]}",
                counted[0] == counted[1],
            ),
            check_row(
                "closed streams aborted in vLLM",
                "running falls to 0",
                f"{running_before:.0f} running -> 0 in {abort_s:.1f} s",
                running_before >= 1 and abort_s < 30,
            ),
        ],
    )
    return [hop, check]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/cluster_vllm.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, default=16, help="closed-loop workers (default 16)")
    p.add_argument("--duration", type=float, default=30.0, help="measured seconds per path (default 30)")
    p.add_argument("--markdown", metavar="PATH", help=f"rewrite the '{SECTION}' section of this file")
    args = p.parse_args(argv)
    stop_on_sigterm()
    started = time.monotonic()
    try:
        result = measure(args)
    except (KeyboardInterrupt, RuntimeError) as exc:
        note("interrupted; servers stopped" if isinstance(exc, KeyboardInterrupt) else f"error: {exc}")
        return 130 if isinstance(exc, KeyboardInterrupt) else 1
    run_s = time.monotonic() - started
    for t in result:
        print("\n" + t.text())
    if args.markdown:
        head = (
            f"{SECTION}\n\nOne vLLM server (`--scheduling-policy priority`, the bundled model, CPU build) behind "
            "one gateway on the same 2-core machine: what the hop costs and whether token counts, priority and "
            "aborts hold against vLLM itself (the docstring has the details). Run with "
            "`.venv/bin/python bench/cluster_vllm.py --markdown docs/BENCHMARKS.md`.\n\n"
            f"Run: commit {git_head()}, {args.duration:g} s per path, {run_s:.0f} s.\n"
        )
        write_section(Path(args.markdown), SECTION, "\n".join([head, *(t.markdown() for t in result)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
