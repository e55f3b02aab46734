"""A high request sent just after a burst of lower ones, at light load: its first token and theirs,
on two configurations of ours side by side (rounds alternate between them, so drift cancels).

Each round sends four low requests at once and, 0.25 s later, one high (the bench's 50-word
prompts, up to 64 tokens), then waits for all five and 3 s of quiet. The second configuration
is the first plus `--b-set`; by default `scheduler.lower_prefills=4`, which on llama.cpp puts
back the bound a burst had before it followed the engine's `batched_prefill` (four lower prompts
prefilling at once while highs come). `--no-high` sends the lows alone: no high ever reaches
either server, so what a burst does with no high traffic in the last half minute shows (the
earliest and latest first token of a round, as means over the rounds).

    .venv/bin/python bench/burst_high.py                    # llama.cpp, 10 rounds each, ~4 minutes
    .venv/bin/python bench/burst_high.py --engine vllm --rounds 6
    .venv/bin/python bench/burst_high.py --no-high --b-set scheduler.lower_prefills=8
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root first: see bench/common.py

from bench.clients import StreamResult, stream_chat  # noqa: E402
from bench.common import Progress, git_head, stop_on_sigterm, table  # noqa: E402
from bench.load import start  # noqa: E402
from bench.load_requests import new_client, request_for  # noqa: E402
from bench.servers import ServerProcess  # noqa: E402

LOWS = 4
HIGH_AFTER_S = 0.25
QUIET_S = 3.0


def first_token_s(r: StreamResult) -> float:
    return r.ttft_s if r.ok else float("nan")


async def one_round(server: ServerProcess, base: int, with_high: bool) -> tuple[float | None, list[float]]:
    async with new_client(server.url) as client:
        lows = [
            asyncio.create_task(stream_chat(client, *request_for("ours", base + i, "low"), 120)) for i in range(LOWS)
        ]
        high = None
        if with_high:
            await asyncio.sleep(HIGH_AFTER_S)
            high = first_token_s(await stream_chat(client, *request_for("ours", base + LOWS, "high"), 120))
        return high, [first_token_s(r) for r in await asyncio.gather(*lows)]


def row(name: str, rounds: list[tuple[float | None, list[float]]]) -> list[object]:
    highs = [h for h, _ in rounds if h is not None]
    lows = [x for _, ls in rounds for x in ls]
    high = ["-"] * 3
    if highs:
        high = [f"{statistics.mean(highs):.2f}", f"{max(highs):.2f}", f"{sum(h <= 1.0 for h in highs)}/{len(highs)}"]
    return [
        name,
        *high,
        f"{statistics.mean(lows):.2f}",
        f"{statistics.mean(min(ls) for _, ls in rounds):.2f} / {statistics.mean(max(ls) for _, ls in rounds):.2f}",
        f"{max(lows):.2f}",
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/burst_high.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=("llamacpp", "vllm"), default="llamacpp")
    p.add_argument("--rounds", type=int, default=10, help="rounds per configuration (default 10)")
    p.add_argument("--b-set", action="append", default=None, help="a setting of the second configuration")
    p.add_argument("--no-high", action="store_true", help="the lows alone: no high traffic")
    args = p.parse_args(argv)
    b_set = args.b_set or ["scheduler.lower_prefills=4"]
    stop_on_sigterm()
    from engine.kv_size import default_cpu_kv_bytes

    kv = default_cpu_kv_bytes()
    servers: dict[str, ServerProcess] = {}
    try:
        for name, settings in (("default", []), (" ".join(b_set), b_set)):
            servers[name] = start("ours", args.engine, kv, settings)
        results: dict[str, list[tuple[float | None, list[float]]]] = {name: [] for name in servers}
        bar = Progress("rounds", 2 * args.rounds)
        for i in range(args.rounds):
            order = list(servers.items()) if i % 2 == 0 else list(servers.items())[::-1]
            for name, server in order:
                results[name].append(asyncio.run(one_round(server, 1000 + 10 * i, not args.no_high)))
                bar.update(sum(map(len, results.values())))
                time.sleep(QUIET_S)
        bar.done()
    finally:
        for server in servers.values():
            server.stop()
    what = f"{LOWS} lows at once" if args.no_high else f"A high {HIGH_AFTER_S:g} s after {LOWS} lows at once"
    print(
        table(
            f"{what}, ours on {args.engine} ({git_head()}), {args.rounds} rounds each, first token s",
            ["configuration", "high mean", "high max", "high <= 1 s", "low mean", "round's first / last", "low max"],
            [row(name, rs) for name, rs in results.items()],
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
