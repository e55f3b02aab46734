"""Fair share inside a class: while one caller floods the server, does a light caller of the same
class still get answers, and soon? (The Virtual Token Counter of scheduler/fair_share.py.)

    .venv/bin/python bench/fairness.py                                   # simulator, about 3 minutes
    .venv/bin/python bench/fairness.py --markdown docs/BENCHMARKS.md --json /tmp/fairness.json
    .venv/bin/python bench/fairness.py --real                            # vLLM, bundled model, ~15 minutes
    .venv/bin/python bench/fairness.py --set scheduler.max_queue_size=100000   # any server setting

Two named keys, alice (A) and bob (B), both class medium. Phases, each on a freshly started server:
(0) capacity C (req/s): A alone, closed loop, C = workers / mean end-to-end (Little's law);
(1) B alone at 0.1 C: the baseline; (2) A at 3 C and B at 0.1 C, fair share on; (3) the same with
`scheduler.fair_share.enabled=false` (FCFS within the class). Open-loop Poisson arrivals, seeded per
caller, so (1), (2) and (3) send B's identical sequence and (2), (3) A's identical one. Streaming,
max_tokens 64, temperature 0.7 and `"cache": false`. A 429 (the door refusing before the stream
opens) is counted apart from failures and split by reason: queue full or predicted wait.

Simulator (default): a fixed running limit (`scheduler.limit.adaptive=false`, max_concurrency 8) and
every answer exactly 64 tokens (`engine.sim.natural_stop=false`), so C = 8 / service time is known
beforehand; it is shown beside the closed-loop measurement, which drives the rates. --real: the
server's defaults (adaptive limit) in front of vLLM; C only measured. Queue size and wait limits
are the server's defaults in both.

Targets (issue): B's TTFT p99 with fair share on <= 1.5 x B's p99 alone + one service time (B alone's
median end-to-end); B completes 100 % (a full 200 answer); total completed req/s with fair share on
>= 0.95 x with it off. Throughput counts answers finished within the sending window, over its length.

A benchmark, not a test: exit 0 unless something failed to run (1), 130 on Ctrl-C. Servers are always
stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root first: see bench/common.py

from bench.common import (  # noqa: E402
    MODEL_NAME, NO_STORE, OFFLINE_ENV, Progress, ServerProcess, Stats, StreamResult, app_argv, free_port, git_head, note,
    stop_on_sigterm, stream_chat, venv_python,
)
from bench.load import CLIENT_TIMEOUT_S, Planned, _drain, _send, _timed_sleep, level_of, new_client, prompt_for  # noqa: E402
from bench.load_report import Table, _check, ms, num  # noqa: E402

KEYS = {"alice": "sk-alice-00000001", "bob": "sk-bob-000000002"}  # A floods, B is light
KEYS_SETTING = "server.keys=[" + ", ".join(f"{{name: {n}, key: {k}, class: medium}}" for n, k in KEYS.items()) + "]"
A, B = "alice", "bob"
A_LOAD, B_LOAD = 3.0, 0.1  # x capacity
MAX_TOKENS, TEMPERATURE = 64, 0.7
SIM_LIMIT, SIM_TOKEN_MS = 8, 10.0
BASE_SETTINGS = ["logging.file=", "logging.level=WARNING", "server.ui=false", KEYS_SETTING]
SIM_SETTINGS = ["engine.backend=sim", f"engine.sim.token_latency_ms={SIM_TOKEN_MS:g}", "engine.sim.natural_stop=false",
                "scheduler.limit.adaptive=false", f"scheduler.max_concurrency={SIM_LIMIT}"]
SCENARIOS = (("B alone", True, False), ("fair share on", True, True), ("fair share off", False, True))  # fair, with A
SECTION = "## Fair share"


@dataclass
class Mode:
    name: str
    model: str
    settings: list[str]
    duration_s: float
    workers: int  # closed-loop capacity measurement
    capacity_s: float


SIM = Mode("simulator", "sim", SIM_SETTINGS, 30.0, SIM_LIMIT, 10.0)
REAL = Mode("vLLM", MODEL_NAME, [], 120.0, 32, 40.0)


@dataclass
class Record:
    caller: str
    planned_s: float
    status: int
    error_kind: str
    error: str
    ttft_s: float | None
    e2e_s: float | None
    ended_s: float | None  # after the run's start
    tokens: int

    @property
    def ok(self) -> bool:
        return not self.error_kind

    @property
    def refusal(self) -> str:
        """Why a 429 came: the queue's room, the predicted wait, or something else."""
        return "queue full" if "queue is full" in self.error else "wait" if "would hold" in self.error else "other"


@dataclass
class Side:
    """One caller in one scenario."""
    sent: int
    completed: int
    refused: dict[str, int]
    failed: int
    ttft: Stats
    e2e: Stats
    rps: float
    tok_s: float
    errors: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- requests and servers


def request(mode: Mode, caller: str, index: int) -> tuple[dict[str, Any], dict[str, str]]:
    body = {"model": mode.model, "messages": [{"role": "user", "content": prompt_for(index)}], "cache": False,
            "max_tokens": MAX_TOKENS, "temperature": TEMPERATURE, "stream": True,
            "stream_options": {"include_usage": True}}
    return body, {"Authorization": f"Bearer {KEYS[caller]}", **NO_STORE}


def arrivals(seed: int, caller: str, rate: float, duration_s: float, first_index: int) -> list[Planned]:
    """Poisson arrivals from a generator of the caller's own: B's sequence is the same in every scenario."""
    rng, out = random.Random(f"{seed}-{caller}"), []
    t = rng.expovariate(rate)
    while t < duration_s:
        out.append(Planned(first_index + len(out), t, caller))
        t += rng.expovariate(rate)
    return out


def start_server(mode: Mode, fair: bool, extra: list[str], label: str) -> ServerProcess:
    settings = [*BASE_SETTINGS, *mode.settings, f"scheduler.fair_share.enabled={str(fair).lower()}", *extra]
    port = free_port()
    server = ServerProcess(label, app_argv(port, settings, venv_python()), port, "/healthz", OFFLINE_ENV,
                           log_prefix="bench-fairness")
    note(f"starting our server ({mode.name}, fair share {'on' if fair else 'off'}) on :{port} ...")
    server.start()
    try:
        server.wait_ready(step_s=0.2, progress=mode is REAL)
        asyncio.run(warm_up(server, mode))
    except BaseException:
        server.stop()
        raise
    return server


async def warm_up(server: ServerProcess, mode: Mode) -> None:
    """Two requests per key together, not recorded: lazy paths and the door's drain estimate."""
    async with new_client(server.url) as client:
        results = await asyncio.gather(*(stream_chat(client, *request(mode, c, -1 - i), 120) for c in KEYS
                                         for i in range(2)))
    if failed := [r.error for r in results if r.error]:
        raise RuntimeError(f"warm-up failed: {failed[0]}")


# ----------------------------------------------------------------------------- measuring


async def closed_loop(server: ServerProcess, mode: Mode) -> tuple[float, float]:
    """A alone, `workers` back to back: (req/s, mean end-to-end s) over requests sent after a warm-up."""
    done: list[StreamResult] = []
    warm_s = min(5.0, mode.capacity_s / 2)

    async def worker(client: Any, w: int) -> None:
        for i in range(10**9):
            done.append(await stream_chat(client, *request(mode, A, -1000 * (w + 1) - i), CLIENT_TIMEOUT_S))

    async with new_client(server.url) as client:
        begin = time.perf_counter() + warm_s
        tasks = [asyncio.create_task(worker(client, w)) for w in range(mode.workers)]
        await _timed_sleep(f"capacity, closed loop x{mode.workers}", warm_s + mode.capacity_s)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    sample = [r for r in done if r.ok and r.sent >= begin]
    if not sample:
        raise RuntimeError(f"capacity: no answer completed ({next((r.error for r in done if r.error), 'none sent')})")
    level = level_of(mode.workers, sample)
    return level.rps, level.e2e_mean_s


async def open_loop(server: ServerProcess, mode: Mode, label: str, plan: list[Planned]) -> list[Record]:
    records: list[Record] = []
    async with new_client(server.url) as client:
        t0 = time.perf_counter()

        async def one(p: Planned) -> None:
            r = await stream_chat(client, *request(mode, p.cls, p.index), CLIENT_TIMEOUT_S)
            records.append(Record(p.cls, p.at_s, r.status, r.error_kind, r.error, none_if_nan(r.ttft_s),
                                  none_if_nan(r.e2e_s), None if r.ended is None else r.ended - t0, r.tokens))

        tasks = await _send(plan, t0, one, Progress(f"{label} sending", len(plan), "req"))
        await _drain(tasks, Progress(f"{label} answers", len(tasks), "req"))
    return records


def none_if_nan(x: float) -> float | None:
    return None if x != x else x


def side(records: list[Record], caller: str, duration_s: float) -> Side:
    mine = [r for r in records if r.caller == caller]
    ok = [r for r in mine if r.ok]
    in_window = [r for r in ok if r.ended_s is not None and r.ended_s <= duration_s]
    refused: dict[str, int] = {}
    for r in mine:
        if r.status == 429:
            refused[r.refusal] = refused.get(r.refusal, 0) + 1
    failed = [r for r in mine if not r.ok and r.status != 429]
    return Side(len(mine), len(ok), refused, len(failed), Stats.of([r.ttft_s or 0.0 for r in ok]),
                Stats.of([r.e2e_s or 0.0 for r in ok]), len(in_window) / duration_s,
                sum(r.tokens for r in in_window) / duration_s, [f"{r.status} {r.error}" for r in failed[:3]])


# ----------------------------------------------------------------------------- report


def refusals(s: Side) -> str:
    total = sum(s.refused.values())
    return f"{total}" + (" (" + ", ".join(f"{k} {v}" for k, v in sorted(s.refused.items())) + ")" if total else "")


def scenario_table(sides: dict[str, dict[str, Side]], capacity: float) -> Table:
    names = list(sides)
    rows: list[list[object]] = []
    for caller, label in ((B, "B"), (A, "A")):
        got = [sides[n][caller] for n in names]
        rows += [[f"{label} sent", *(s.sent for s in got)],
                 [f"{label} completed (200, full answer)", *(f"{s.completed} ({num(100 * s.completed / s.sent if s.sent else float('nan'), '.0f')} %)" for s in got)],
                 [f"{label} refused, 429", *(refusals(s) for s in got)],
                 [f"{label} failed otherwise", *(s.failed for s in got)],
                 [f"{label} TTFT p50 / p99 ms", *(f"{ms(s.ttft.p50)} / {ms(s.ttft.p99)}" for s in got)],
                 [f"{label} completed req/s, tok/s", *(f"{num(s.rps)}, {num(s.tok_s, '.0f')}" for s in got)]]
    rows.append(["total completed req/s", *(num(sides[n][A].rps + sides[n][B].rps) for n in names)])
    return Table(f"A at {A_LOAD:g} x C and B at {B_LOAD:g} x C (C = {capacity:.2f} req/s), same class",
                 ["", *names], rows, ["completed req/s and tok/s: answers finished within the sending window, "
                                      "over its length", "refused: HTTP 429 at the door, before a stream opened"])


def targets_table(sides: dict[str, dict[str, Side]]) -> tuple[Table, bool]:
    alone, on, off = (sides[n] for n, _, _ in SCENARIOS)
    service = alone[B].e2e.p50
    limit = 1.5 * alone[B].ttft.p99 + service
    total_on, total_off = on[A].rps + on[B].rps, off[A].rps + off[B].rps
    ratio = total_on / total_off if total_off else float("nan")
    checks = [("B TTFT p99, fair share on", f"<= 1.5 x {ms(alone[B].ttft.p99)} + {ms(service)} = {ms(limit)} ms",
               f"{ms(on[B].ttft.p99)} ms (off: {ms(off[B].ttft.p99)})", on[B].ttft.p99 <= limit),
              ("B completed, fair share on", "100 %", f"{on[B].completed} of {on[B].sent} (off: {off[B].completed} "
               f"of {off[B].sent})", on[B].sent > 0 and on[B].completed == on[B].sent),
              ("total req/s, fair share on / off", ">= 0.95", f"{num(total_on)} / {num(total_off)} = {num(ratio, '.3f')}",
               ratio >= 0.95)]
    rows = [_check(*c) for c in checks]
    return Table("Targets", ["target", "goal", "measured", "result"], rows,
                 ["service time: median end-to-end of B alone"]), all(c[3] for c in checks)


def capacity_table(mode: Mode, measured: float, e2e_s: float) -> Table:
    rows: list[list[object]] = [["measured (closed loop)", f"{measured:.2f}", f"{e2e_s * 1000:,.0f}"]]
    if mode is SIM:
        from settings.schema import SimConfig

        step_s = SIM_TOKEN_MS / 1000 * (1 + SimConfig().batch_slowdown * (SIM_LIMIT - 1))
        rows.append([f"computed: {SIM_LIMIT} running / ({MAX_TOKENS} tokens x {step_s * 1000:.1f} ms)",
                     f"{SIM_LIMIT / (MAX_TOKENS * step_s):.2f}", f"{MAX_TOKENS * step_s * 1000:,.0f}"])
    return Table(f"Capacity C, A alone ({mode.name}, {mode.workers} closed-loop workers)",
                 ["", "req/s", "end-to-end ms"], rows, ["computed leaves out prefill and HTTP"] if mode is SIM else [])


def write_markdown(path: Path, meta: dict[str, Any], tables: list[Table]) -> None:
    """Rewrite the Fair share section (from its heading to the next `## `), or append it."""
    head = (f"{SECTION}\n\n`bench/fairness.py`: user A (key alice) floods at {A_LOAD:g} x capacity, user B (key bob) "
            f"sends at {B_LOAD:g} x, same class (medium); B alone first, then both with fair share on and off, each "
            "on a fresh server (see the module docstring). Run: `.venv/bin/python bench/fairness.py --markdown "
            f"docs/BENCHMARKS.md` (`--real` for vLLM).\n\nRun: {meta['mode']}, commit {meta['commit']}, seed "
            f"{meta['seed']}, {meta['duration_s']:g} s of sending per scenario, extra settings "
            f"{meta['extra_settings'] or 'none'}, run time {meta['run_s']:.0f} s.\n")
    section = "\n".join([head, *(t.markdown() for t in tables)]).rstrip() + "\n"
    lines = path.read_text().splitlines(keepends=True) if path.exists() else []
    start = next((i for i, line in enumerate(lines) if line.rstrip() == SECTION), None)
    if start is None:
        text = "".join(lines).rstrip() + ("\n\n" if lines else "") + section
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        text = "".join(lines[:start]) + section + ("\n" + "".join(lines[end:]) if end < len(lines) else "")
    path.write_text(text)
    note(f"wrote {path}")


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/fairness.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--real", action="store_true", help="the vLLM engine with the bundled model (slow)")
    p.add_argument("--duration", type=float, help="seconds of sending per scenario (default 30, --real 120)")
    p.add_argument("--seed", type=int, default=1, help="seed of the arrival sequences (default 1)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="extra",
                   help="a setting for every server start, passed as --set (repeatable)")
    p.add_argument("--json", metavar="PATH", help="write every request record and the summaries as JSON")
    p.add_argument("--markdown", metavar="PATH", help="rewrite the '## Fair share' section of this file")
    args = p.parse_args(argv)
    args.mode = REAL if args.real else SIM
    args.duration = args.duration or args.mode.duration_s
    return args


def measure(args: argparse.Namespace) -> tuple[float, float, dict[str, list[Record]]]:
    mode = args.mode
    server = start_server(mode, True, args.extra, "capacity")
    try:
        capacity, e2e_s = asyncio.run(closed_loop(server, mode))
    finally:
        server.stop()
    note(f"C = {capacity:.2f} req/s")
    a_plan = arrivals(args.seed, A, A_LOAD * capacity, args.duration, 0)
    b_plan = arrivals(args.seed, B, B_LOAD * capacity, args.duration, 1_000_000)
    runs: dict[str, list[Record]] = {}
    for name, fair, with_a in SCENARIOS:
        plan = sorted(b_plan + (a_plan if with_a else []), key=lambda p: p.at_s)
        server = start_server(mode, fair, args.extra, name.replace(" ", "-"))
        try:
            runs[name] = asyncio.run(open_loop(server, mode, name, plan))
        finally:
            server.stop()
    return capacity, e2e_s, runs


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop_on_sigterm()
    started = time.monotonic()
    meta: dict[str, Any] = {"mode": args.mode.name, "commit": git_head(), "seed": args.seed,
                            "duration_s": args.duration, "extra_settings": args.extra}
    print("bench/fairness.py  " + "  ".join(f"{k}={v}" for k, v in meta.items()), flush=True)
    try:
        capacity, e2e_s, runs = measure(args)
    except KeyboardInterrupt:
        note("interrupted; servers stopped")
        return 130
    except RuntimeError as exc:
        note(f"error: {exc}")
        return 1
    meta["run_s"] = time.monotonic() - started
    sides = {name: {c: side(recs, c, args.duration) for c in KEYS} for name, recs in runs.items()}
    targets, passed = targets_table(sides)
    tables = [capacity_table(args.mode, capacity, e2e_s), scenario_table(sides, capacity), targets]
    for t in tables:
        print("\n" + t.text())
    for name, by_caller in sides.items():
        for caller, s in by_caller.items():
            for e in s.errors:
                print(f"  {name}, {caller}: {e}")
    print(f"\n{'all targets met' if passed else 'a target missed'}; run time {meta['run_s']:.0f} s")
    if args.json:
        data = {"meta": meta, "capacity_rps": capacity, "sides": {n: {c: asdict(s) for c, s in d.items()}
                                                                  for n, d in sides.items()},
                "records": {n: [asdict(r) for r in recs] for n, recs in runs.items()}}
        strict = json.loads(json.dumps(data), parse_constant=lambda _: None)  # NaN (no samples) -> null
        Path(args.json).write_text(json.dumps(strict, indent=1) + "\n")
        note(f"wrote {args.json}")
    if args.markdown:
        write_markdown(Path(args.markdown), meta, tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
