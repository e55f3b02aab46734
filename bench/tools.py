"""Tool-call parsing benchmark: what reading calls out of a stream costs per delta.

    .venv/bin/python bench/tools.py            # about a minute on 2 cores
    .venv/bin/python bench/tools.py --quick    # about 20 s, a smoke run

Part 1, over HTTP: our server in its own process on the simulator (5 ms per decode step, so 256
streams decode together), 256 concurrent streaming requests per cell, in alternating cells
(off, on, on, off, ...). Tools off: plain text answers of N tokens. Tools on: the same requests with
a function tool, so the simulator writes a call in N token-sized pieces and the server reads it
with the parser of the output format (`<tool_call>` tags; harmony with `--harmony`). Measured: the
server process's CPU time per delta the engine produced, from /proc. The difference, on minus
off, is what parsing adds to a delta, together with every other per-call cost on the path (a
request with tools renders them into the prompt and its answer carries a tool_calls object).
Part 2, in process: each parser alone, fed a call in 4-character pieces, time per piece.

A benchmark, not a test: it prints tables and exits 0 unless something failed to run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root first: see bench/common.py

from bench.clients import one_connection_client, stream_chat
from bench.common import SIM_SERVER_SETTINGS, Progress, note, table
from bench.machine import process_cpu_s
from bench.servers import app_argv, free_port, running_server, venv_python

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "unit", "days"],
        },
    },
}
STREAMS = 256


def body(tools: bool, max_tokens: int) -> dict:
    request = {
        "model": "sim",
        "messages": [{"role": "user", "content": "What is the weather in Oslo?"}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return {**request, "tools": [TOOL]} if tools else request


async def cell(url: str, pid: int, tools: bool, max_tokens: int) -> tuple[float, int, int]:
    """(server CPU seconds, deltas the engine produced, failed requests) for one round of streams."""
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(one_connection_client(url, 120)) for _ in range(STREAMS)]
        cpu0 = process_cpu_s(pid)
        results = await asyncio.gather(*(stream_chat(c, body(tools, max_tokens)) for c in clients))
        cpu = (process_cpu_s(pid) or 0.0) - (cpu0 or 0.0)
    failed = sum(not r.ok and r.error_kind != "incomplete" for r in results)
    return cpu, sum(r.tokens for r in results), failed


async def over_http(rounds: int, harmony: bool) -> tuple[list[list[object]], int]:
    settings = [
        *SIM_SERVER_SETTINGS,
        "engine.sim.token_latency_ms=5",
        "engine.sim.natural_stop=false",
        "scheduler.max_concurrency=256",
        "scheduler.limit.adaptive=false",
        "server.ui=false",
        "cache.enabled=false",
        f"engine.sim.harmony={str(harmony).lower()}",
    ]
    port = free_port()
    per_delta: dict[bool, list[float]] = {False: [], True: []}
    tokens: dict[bool, int] = {False: 0, True: 0}
    failures = 0
    with running_server("ours", app_argv(port, settings, venv_python()), port) as server:
        async with one_connection_client(server.url) as probe:  # how long the simulator's call is
            call_tokens = (await stream_chat(probe, body(True, 400))).tokens
        order = [flag for r in range(rounds) for flag in ((False, True) if r % 2 == 0 else (True, False))]
        progress = Progress("cells", len(order))
        for done, tools in enumerate([False, True] + order):  # the first two warm up
            cpu, deltas, failed = await cell(server.url, server.proc.pid, tools, call_tokens)
            if done >= 2:
                per_delta[tools].append(cpu / max(deltas, 1) * 1e6)
                tokens[tools] += deltas
                failures += failed
                progress.update(done - 1)
        progress.done()
    rows = [
        [
            name,
            f"{tokens[flag]:,}",
            f"{statistics.median(per_delta[flag]):.1f}",
            " / ".join(f"{v:.1f}" for v in per_delta[flag]),
        ]
        for name, flag in (("tools off", False), ("tools on", True))
    ]
    added = statistics.median(per_delta[True]) - statistics.median(per_delta[False])
    rows.append(["added by tools", "", f"{added:+.1f}", f"{added / statistics.median(per_delta[False]):+.1%}"])
    return rows, failures


def parser_alone(pieces_count: int) -> list[list[object]]:
    from engine.harmony import HarmonyParser
    from engine.hermes import ToolCallParser

    args = '{"city": "Oslo", "unit": "celsius", "days": 3}'
    texts = {
        "<tool_call> (hermes)": f'<tool_call>\n{{"name": "get_weather", "arguments": {args}}}\n</tool_call>',
        "harmony, tools on": f"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{args}<|call|>",
        "harmony, tools off": f"<|channel|>analysis<|message|>{args}<|end|>",
    }
    rows = []
    for name, text in texts.items():
        pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
        make = ToolCallParser if name.startswith("<tool_call>") else lambda: HarmonyParser(tools="on" in name)  # noqa: B023
        runs = max(1, pieces_count // len(pieces))
        start = time.perf_counter()
        for _ in range(runs):
            parser = make()
            for piece in pieces:
                parser.feed(piece)
            parser.finish()
        rows.append(
            [name, f"{runs * len(pieces):,}", f"{(time.perf_counter() - start) / (runs * len(pieces)) * 1e6:.2f}"]
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds instead of 6")
    parser.add_argument("--harmony", action="store_true", help="the simulator writes harmony, as gpt-oss does")
    args = parser.parse_args()
    note(f"[tools] {STREAMS} concurrent streams per cell; server on the simulator")
    rows, failures = asyncio.run(over_http(2 if args.quick else 6, args.harmony))
    print(
        table(
            f"Server CPU per engine delta, {STREAMS} concurrent streams"
            + (" (harmony)" if args.harmony else " (<tool_call> form)"),
            ["", "deltas", "us per delta (median)", "per cell"],
            rows,
            [f"failed requests: {failures}"],
        )
    )
    print(
        table(
            "Parser alone, one call in 4-character pieces",
            ["parser", "pieces", "us per piece"],
            parser_alone(20_000 if args.quick else 200_000),
        )
    )
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
