"""Fair share inside a class: while one caller floods the server, does a light caller of the same
class still get its answers, and soon? (The Virtual Token Counter of scheduler/fair_share.py.)

    .venv/bin/python bench/fairness.py                                   # simulator, about 3 minutes
    .venv/bin/python bench/fairness.py --markdown docs/BENCHMARKS.md --json /tmp/fairness.json
    .venv/bin/python bench/fairness.py --real                            # vLLM, bundled model, ~15 minutes
    .venv/bin/python bench/fairness.py --set scheduler.max_queue_size=100000   # any server setting

Two named keys, alice (A) and bob (B), both class medium. Phases, each on a freshly started server:
(0) capacity C: A alone in a closed loop, C = workers / mean end-to-end (Little's law); (1) B alone
at 0.1 C, the baseline; (2) A at 3 C and B at 0.1 C with fair share on; (3) the same with
`scheduler.fair_share.enabled=false` (FCFS within the class). Open-loop Poisson arrivals seeded per
caller, so B's sequence is identical in (1)-(3) and A's in (2) and (3). Streaming, max_tokens 64,
temperature 0.7 and `"cache": false`. A 429 (the door refusing before a stream opens) is counted
apart from failures, by its reason: the queue is full, or the predicted wait is too long.

Simulator (default): a fixed running limit (`scheduler.limit.adaptive=false`, max_concurrency 8)
and every answer exactly 64 tokens (`engine.sim.natural_stop=false`), so C = 8 / service time is
known beforehand; it is printed beside the closed-loop figure, which sets the rates. --real: the
server's defaults (adaptive limit) in front of vLLM, C measured only. The queue's size and wait
limits are the server's defaults in both.

Targets (from the issue): B's TTFT p99 with fair share on <= 1.5 x B's p99 alone + one service time
(B alone's median end-to-end); B completes 100 % (a full 200 answer); total completed req/s with
fair share on >= 0.95 x with it off. Throughput counts answers finished within the sending window.

A benchmark, not a test: exit 0 unless something failed to run (1), 130 on Ctrl-C. The keys, modes,
requests, servers and loops are in bench/fairness_rig.py; this file holds the scenarios and tables.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root first: see bench/common.py

from bench.common import git_head, note, stop_on_sigterm  # noqa: E402
from bench.fairness_rig import (  # noqa: E402
    A_LOAD,
    B_LOAD,
    KEYS,
    MAX_TOKENS,
    REAL,
    SIM,
    SIM_LIMIT,
    SIM_TOKEN_MS,
    A,
    B,
    Mode,
    Record,
    Side,
    arrivals,
    closed_loop,
    open_loop,
    serving,
    side,
)
from bench.report import Table, check_row, ms, num, write_json, write_section  # noqa: E402

SCENARIOS = (("B alone", True, False), ("fair share on", True, True), ("fair share off", False, True))  # fair, with A
SECTION = "## Fair share"


# ----------------------------------------------------------------------------- report


def capacity_table(mode: Mode, rps: float, e2e_s: float) -> Table:
    rows: list[list[object]] = [["measured (closed loop)", f"{rps:.2f}", ms(e2e_s)]]
    if mode is SIM:
        from settings.schema import SimConfig

        step_s = SIM_TOKEN_MS / 1000 * (1 + SimConfig().batch_slowdown * (SIM_LIMIT - 1))
        rows.append(
            [
                f"computed: {SIM_LIMIT} running / ({MAX_TOKENS} tokens x {step_s * 1000:.1f} ms)",
                f"{SIM_LIMIT / (MAX_TOKENS * step_s):.2f}",
                ms(MAX_TOKENS * step_s),
            ]
        )
    return Table(
        f"Capacity C, A alone ({mode.name}, {mode.workers} closed-loop workers)",
        ["", "req/s", "end-to-end mean ms"],
        rows,
        ["computed leaves out prefill and HTTP"] if mode is SIM else [],
    )


def refusals(s: Side) -> str:
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(s.refused.items()))
    return f"{sum(s.refused.values())} ({reasons})" if reasons else "0"


def scenario_table(sides: dict[str, dict[str, Side]], capacity: float) -> Table:
    rows: list[list[object]] = []
    for caller, who in ((B, "B"), (A, "A")):
        got = [by_caller[caller] for by_caller in sides.values()]
        rows += [
            [f"{who} sent", *(s.sent for s in got)],
            [
                f"{who} completed (200, full answer)",
                *(f"{s.completed} ({num(100 * s.completed / s.sent, '.0f')} %)" if s.sent else "0" for s in got),
            ],
            [f"{who} refused, 429", *(refusals(s) for s in got)],
            [f"{who} failed otherwise", *(s.failed for s in got)],
            [f"{who} TTFT p50 / p99 ms", *(f"{ms(s.ttft.p50)} / {ms(s.ttft.p99)}" for s in got)],
            [f"{who} first to last token p50 ms", *(ms(s.decode.p50) for s in got)],
            [f"{who} completed req/s, tok/s", *(f"{num(s.rps)}, {num(s.tok_s, '.0f')}" for s in got)],
        ]
    rows.append(["total completed req/s", *(num(d[A].rps + d[B].rps) for d in sides.values())])
    return Table(
        f"A at {A_LOAD:g} x C and B at {B_LOAD:g} x C (C = {capacity:.2f} req/s), same class",
        ["", *sides],
        rows,
        [
            "req/s and tok/s: answers finished within the sending window, over its length",
            "refused: HTTP 429 at the door, before a stream opened, by reason",
        ],
    )


def targets_table(sides: dict[str, dict[str, Side]]) -> tuple[Table, bool]:
    alone, on, off = (sides[name][B] for name, _, _ in SCENARIOS)
    service, total = alone.e2e.p50, {n: d[A].rps + d[B].rps for n, d in sides.items()}
    limit = 1.5 * alone.ttft.p99 + service
    ratio = total["fair share on"] / total["fair share off"] if total["fair share off"] else float("nan")
    checks = [
        (
            "B TTFT p99, fair share on",
            f"<= 1.5 x {ms(alone.ttft.p99)} + {ms(service)} = {ms(limit)} ms",
            f"{ms(on.ttft.p99)} ms (off: {ms(off.ttft.p99)})",
            on.ttft.p99 <= limit,
        ),
        (
            "B completed, fair share on",
            "100 %",
            f"{on.completed} of {on.sent} (off: {off.completed} of {off.sent})",
            on.sent > 0 and on.completed == on.sent,
        ),
        (
            "total req/s, fair share on / off",
            ">= 0.95",
            f"{num(total['fair share on'])} / {num(total['fair share off'])} = {num(ratio, '.3f')}",
            ratio >= 0.95,
        ),
    ]
    return Table(
        "Targets",
        ["target", "goal", "measured", "result"],
        [check_row(*c) for c in checks],
        ["service time: B alone's median end-to-end (a batch of one; under load each token takes longer)"],
    ), all(c[3] for c in checks)


def write_markdown(path: Path, meta: dict[str, Any], tables: list[Table]) -> None:
    """Rewrite the Fair share section, from its heading to the next `## ` heading, or append it."""
    head = (
        f"{SECTION}\n\n`bench/fairness.py`: user A (key alice) floods at {A_LOAD:g} x capacity while user B (key "
        f"bob) sends at {B_LOAD:g} x, same class (medium); B alone first, then both with fair share on and off, "
        "each against a fresh server (its docstring has the details). Run with `.venv/bin/python "
        "bench/fairness.py --markdown docs/BENCHMARKS.md` (`--real` for vLLM).\n\n"
        f"Run: {meta['mode']}, commit {meta['commit']}, seed {meta['seed']}, {meta['duration_s']:g} s of sending "
        f"per scenario, extra settings: {' '.join(meta['extra_settings']) or 'none'}, {meta['run_s']:.0f} s.\n"
    )
    write_section(path, SECTION, "\n".join([head, *(t.markdown() for t in tables)]))


def as_json(
    meta: dict[str, Any], capacity: float, sides: dict[str, dict[str, Side]], runs: dict[str, list[Record]]
) -> dict[str, Any]:
    return {
        "meta": meta,
        "capacity_rps": capacity,
        "sides": {n: {c: asdict(s) for c, s in d.items()} for n, d in sides.items()},
        "records": {n: [asdict(r) for r in recs] for n, recs in runs.items()},
    }


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/fairness.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--real", action="store_true", help="the vLLM engine with the bundled model (slow)")
    p.add_argument("--duration", type=float, help="seconds of sending per scenario (default 30, --real 120)")
    p.add_argument("--seed", type=int, default=1, help="seed of the arrival sequences (default 1)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="extra",
        help="a setting for every server, passed to app.py as --set (repeatable)",
    )
    p.add_argument("--json", metavar="PATH", help="write every request record and the summaries as JSON")
    p.add_argument("--markdown", metavar="PATH", help="rewrite the '## Fair share' section of this file")
    args = p.parse_args(argv)
    args.mode = REAL if args.real else SIM
    args.duration = args.duration or args.mode.duration_s
    return args


def measure(args: argparse.Namespace) -> tuple[float, float, dict[str, list[Record]]]:
    mode = args.mode
    if mode is REAL:  # one KV size for every start (it is a share of the memory free at the time)
        from engine.kv_size import default_cpu_kv_bytes

        mode.settings = ["engine.backend=vllm", f"engine.vllm.kv_cache_memory_bytes={default_cpu_kv_bytes()}"]
    with serving(mode, True, args.extra, "capacity") as server:
        capacity, e2e_s = asyncio.run(closed_loop(server, mode))
    note(f"C = {capacity:.2f} req/s")
    a_plan = arrivals(args.seed, A, A_LOAD * capacity, args.duration, 0)
    b_plan = arrivals(args.seed, B, B_LOAD * capacity, args.duration, 1_000_000)
    runs: dict[str, list[Record]] = {}
    for name, fair, with_a in SCENARIOS:
        plan = sorted(b_plan + (a_plan if with_a else []), key=lambda p: p.at_s)
        with serving(mode, fair, args.extra, name.replace(" ", "-")) as server:
            runs[name] = asyncio.run(open_loop(server, mode, name, plan))
    return capacity, e2e_s, runs


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop_on_sigterm()
    started = time.monotonic()
    meta: dict[str, Any] = {
        "mode": args.mode.name,
        "commit": git_head(),
        "seed": args.seed,
        "duration_s": args.duration,
        "extra_settings": args.extra,
    }
    print("bench/fairness.py  " + "  ".join(f"{k}={v}" for k, v in meta.items()), flush=True)
    try:
        capacity, e2e_s, runs = measure(args)
    except (KeyboardInterrupt, RuntimeError) as exc:  # servers are stopped by then
        interrupted = isinstance(exc, KeyboardInterrupt)
        note("interrupted; servers stopped" if interrupted else f"error: {exc}")
        return 130 if interrupted else 1
    meta["run_s"] = time.monotonic() - started
    sides = {name: {c: side(recs, c, args.duration) for c in KEYS} for name, recs in runs.items()}
    targets, passed = targets_table(sides)
    tables = [capacity_table(args.mode, capacity, e2e_s), scenario_table(sides, capacity), targets]
    for t in tables:
        print("\n" + t.text())
    for name, by_caller in sides.items():
        for caller, s in by_caller.items():
            print("".join(f"  {name}, {caller}: {e}\n" for e in s.errors), end="")
    print(f"\n{'all targets met' if passed else 'a target missed'}; run time {meta['run_s']:.0f} s")
    if args.json:
        write_json(Path(args.json), as_json(meta, capacity, sides, runs))
    if args.markdown:
        write_markdown(Path(args.markdown), meta, tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
