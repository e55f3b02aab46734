"""Batch jobs on idle capacity: does a batch fill the engine when it is alone, and stay out of
interactive users' way when they come? On this machine's real engine, in one run:

1. the engine's own server in a closed loop at rising concurrency: its peak tokens/s (and C_slo);
   then the same N lines the batch will hold, sent to it by as many workers as gave that peak (a
   script's way to run a batch without us): tokens/s over the whole run, its start and tail included;
2. an N-line batch alone through our Batch API: its tokens/s against both;
3. interactive open-loop load at 0.7x C_slo through ours, without a batch and then with the same
   batch running: each class's TTFT p50/p99 and TPOT p50 side by side, and the batch's tokens/s
   against what the engine had left over (peak minus the interactive tokens/s).

Prints tables; `--plot PATH` draws the batch's progress over time above the interactive arrivals.
Run on purpose: `.venv/bin/python bench/batch.py --engine llamacpp --lines 2000`.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root first: see bench/common.py

from bench.calibration import calibrate  # noqa: E402
from bench.common import MODEL_NAME, Progress, note, table, timed_sleep  # noqa: E402
from bench.load import BASELINE, FULL, run_load, start  # noqa: E402
from bench.load_records import Run  # noqa: E402
from bench.load_requests import MAX_TOKENS, TEMPERATURE, prompt_for  # noqa: E402
from bench.load_summary import Slo, summarize  # noqa: E402
from bench.servers import ServerProcess  # noqa: E402
from engine.kv_size import default_cpu_kv_bytes  # noqa: E402


@dataclass
class BatchRun:
    lines: int
    started_s: float = 0.0
    ended_s: float = 0.0
    completion_tokens: int = 0
    progress: list[tuple[float, int]] = field(default_factory=list)  # (seconds from t0, lines done)
    status: str = ""

    @property
    def tok_s(self) -> float:
        return self.completion_tokens / max(1e-9, self.ended_s - self.started_s)

    def tok_s_between(self, start_s: float, end_s: float) -> float:
        """Tokens of the lines answered in [start_s, end_s] a second, at the batch's mean tokens a line."""

        def done_by(t: float) -> int:
            return max((n for at, n in self.progress if at <= t), default=0)

        answered = max(1, done_by(self.ended_s))
        return (done_by(end_s) - done_by(start_s)) * self.completion_tokens / answered / max(1e-9, end_s - start_s)


def batch_file(lines: int, first: int) -> bytes:
    """Prompts from `first` on: each run its own, so no answer comes from the cache or an engine's prefix cache."""
    rows = [
        {
            "custom_id": f"b{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": MODEL_NAME,
                "messages": [{"role": "user", "content": prompt_for(first + i)}],
                "max_tokens": MAX_TOKENS,
                "temperature": TEMPERATURE,
            },
        }
        for i in range(lines)
    ]
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


async def run_batch(url: str, lines: int, t0: float, first: int, until: asyncio.Event | None = None) -> BatchRun:
    """Upload, create, poll every half second to the end (or, with `until`, until it is set: the
    batch is then cancelled and its tokens so far counted)."""
    out = BatchRun(lines)
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        up = await client.post(
            "/v1/files", files={"file": ("b.jsonl", io.BytesIO(batch_file(lines, first)))}, data={"purpose": "batch"}
        )
        up.raise_for_status()
        made = await client.post(
            "/v1/batches",
            json={"input_file_id": up.json()["id"], "completion_window": "24h", "endpoint": "/v1/chat/completions"},
        )
        made.raise_for_status()
        batch_id = made.json()["id"]
        bar = Progress(f"batch of {lines}", lines, "line")
        out.started_s = time.perf_counter() - t0
        while True:
            state = (await client.get(f"/v1/batches/{batch_id}")).json()
            counts = state["request_counts"]
            out.progress.append((time.perf_counter() - t0, counts["completed"]))  # a cancel fails the rest at once
            bar.update(counts["completed"] + counts["failed"])
            if state["status"] in ("completed", "failed", "expired", "cancelled"):
                break
            if until is not None and until.is_set() and state["status"] == "in_progress":
                await client.post(f"/v1/batches/{batch_id}/cancel")
            await asyncio.sleep(0.5)
        bar.done()
        out.ended_s, out.status = time.perf_counter() - t0, state["status"]
        if state.get("output_file_id"):
            text = (await client.get(f"/v1/files/{state['output_file_id']}/content")).text
            out.completion_tokens = sum(
                json.loads(x)["response"]["body"]["usage"]["completion_tokens"] for x in text.splitlines()
            )
    return out


async def engine_lines(url: str, lines: int, first: int, concurrency: int) -> BatchRun:
    """The batch's lines straight to the engine's own server, `concurrency` at a time."""
    bodies = iter(json.loads(row)["body"] for row in batch_file(lines, first).splitlines())
    out = BatchRun(lines)
    bar = Progress(f"{lines} lines straight to the engine, {concurrency} at a time", lines, "line")
    done, t0 = 0, time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=httpx.Limits(max_connections=None)) as client:

        async def worker() -> None:
            nonlocal done
            for body in bodies:  # one iterator shared by every worker: each line sent once
                answer = await client.post("/v1/chat/completions", json=body)
                answer.raise_for_status()
                out.completion_tokens += answer.json()["usage"]["completion_tokens"]
                done += 1
                bar.update(done)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    bar.done()
    out.ended_s, out.status = time.perf_counter() - t0, "completed"
    return out


_FILL_S = 5.0  # the batch alone before the interactive load starts


async def interactive_with_batch(
    server: ServerProcess, load: float, capacity: float, duration_s: float, lines: int
) -> tuple[Run, BatchRun]:
    t0 = time.perf_counter()
    stop = asyncio.Event()
    batch = asyncio.create_task(run_batch(server.url, lines, t0, 200_000, stop))
    await timed_sleep("batch filling the engine", _FILL_S)
    run = await run_load(server, load, capacity, duration_s, 1, 5.0, until_quiet=False)  # the batch keeps it busy
    stop.set()  # the lines in flight finish after the load: only those answered while it was sent count beside it
    return run, await batch


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=("vllm", "llamacpp"), default="llamacpp")
    p.add_argument("--lines", type=int, default=2000)
    p.add_argument("--load", type=float, default=0.7, help="interactive load as a multiple of C_slo")
    p.add_argument("--duration", type=float, default=40.0, help="seconds of interactive sending")
    p.add_argument("--calibration-s", type=float, default=20.0, help="measured seconds per closed-loop level")
    p.add_argument("--plot", default="", help="PNG of the batch's progress over the interactive arrivals")
    args = p.parse_args()
    kv = default_cpu_kv_bytes()
    engine_name = BASELINE[args.engine]
    own = start(engine_name, args.engine, kv, [])
    try:
        # Past 48: vLLM's best. A level's window must outlast a request (about 30 s at 128 on vLLM's
        # CPU build): at 6 s it read 99 tok/s at 128 where 20 s read 232.
        cal = asyncio.run(calibrate(own, (*FULL.levels, 64, 96, 128), args.calibration_s, 0.1))
        best = max(cal.levels, key=lambda level: level.tok_s)
        straight = asyncio.run(engine_lines(own.url, args.lines, 100_000, best.concurrency))
    finally:
        own.stop()
    peak = best.tok_s
    note(
        f"{engine_name}: peak {peak:.0f} tok/s, C_slo {cal.c_slo:.2f} req/s; closed loop tok/s by concurrency: "
        + ", ".join(f"{level.concurrency}: {level.tok_s:.0f}" for level in cal.levels)
    )
    data = tempfile.mkdtemp(prefix="bench-batch-")  # no batch left over from another run resumes here
    ours = start(
        "ours",
        args.engine,
        kv,
        ["scheduler.slo.tpot_s=0.1", "scheduler.slo.ttft_s=1", f"batches.path={data}/batches.sqlite3"],
    )
    try:
        alone = asyncio.run(run_batch(ours.url, args.lines, time.perf_counter(), 100_000))
        without = asyncio.run(run_load(ours, args.load, cal.c_slo, args.duration, 1, 5.0))
        with_batch, during = asyncio.run(interactive_with_batch(ours, args.load, cal.c_slo, args.duration, args.lines))
    finally:
        ours.stop()
    report(peak, straight, alone, without, with_batch, during, args)
    if args.plot:
        plot(args.plot, with_batch, during)
    return 0


def report(
    peak: float,
    straight: BatchRun,
    alone: BatchRun,
    without: Run,
    with_batch: Run,
    during: BatchRun,
    args: argparse.Namespace,
) -> None:
    slo = Slo(0.1, {"high": 1.0, "low": 60.0})
    print(
        table(
            f"A batch of {args.lines} alone",
            [
                "engine peak tok/s (closed loop)",
                "the same lines straight to the engine: tok/s, s",
                "batch through ours: tok/s, s",
                "ratio to the peak",
                "ratio to the same lines",
                "status",
            ],
            [
                [
                    f"{peak:.0f}",
                    f"{straight.tok_s:.0f}, {straight.ended_s:.0f}",
                    f"{alone.tok_s:.0f}, {alone.ended_s - alone.started_s:.0f}",
                    f"{alone.tok_s / peak:.2f}x",
                    f"{alone.tok_s / straight.tok_s:.2f}x",
                    alone.status,
                ]
            ],
        )
    )
    rows = []
    for cls in ("high", "low", "all"):
        a, b = summarize(without, cls, slo), summarize(with_batch, cls, slo)
        rows.append(
            [
                cls,
                f"{a.ttft.p50:.3f} / {b.ttft.p50:.3f}",
                f"{a.ttft.p99:.3f} / {b.ttft.p99:.3f}",
                f"{a.tpot.p50:.3f} / {b.tpot.p50:.3f}",
                f"{a.tpot.p99:.3f} / {b.tpot.p99:.3f}",
                f"{a.tok_s:.0f} / {b.tok_s:.0f}",
                f"{b.ttft.p99 / a.ttft.p99:.2f}x",
            ]
        )
    print(
        table(
            f"Interactive load {args.load:g}x C_slo, without / with the batch running (s)",
            ["class", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "tok/s", "TTFT p99 ratio"],
            rows,
        )
    )
    interactive = summarize(with_batch, "all", slo).tok_s
    left = max(1e-9, peak - interactive)
    beside = during.tok_s_between(_FILL_S, _FILL_S + args.duration)
    print(
        table(
            "The batch beside interactive load (lines answered while it was sent)",
            ["left over tok/s", "batch tok/s", "share of left over"],
            [[f"{left:.0f}", f"{beside:.0f}", f"{beside / left:.2f}"]],
        )
    )


def plot(path: str, run: Run, batch: BatchRun) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 5))
    top.plot([t - _FILL_S for t, _ in batch.progress], [n for _, n in batch.progress])
    top.set_ylabel("batch lines answered")
    for cls, colour in (("high", "tab:red"), ("low", "tab:blue")):
        sent = [r.sent_s for r in run.records if r.cls == cls]
        bottom.eventplot([sent], colors=colour, lineoffsets=1 if cls == "high" else 0, linelengths=0.8)
    bottom.set_yticks([0, 1], ["low", "high"])
    bottom.set_xlabel("seconds (interactive arrivals, from the load's start)")
    fig.tight_layout()
    fig.savefig(path)


if __name__ == "__main__":
    raise SystemExit(main())
