"""What every benchmark in bench/ shares: where things are, the bundled model and prompts, output
(progress bars, notes, tables) and statistics. The machine's readings are in bench/machine.py,
server processes in bench/servers.py, HTTP clients in bench/clients.py, open-loop sending in
bench/open_loop.py, result tables and files in bench/report.py: written once so that every
benchmark measures and reports the same way.

Each benchmark starts with one line before importing from bench:

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root first

Run as `python bench/x.py`, Python puts bench/ first on sys.path, where bench/scheduler.py,
bench/engine.py and bench/cache.py would shadow the packages of the same names; importing this
module (every bench module does) then drops bench/ from sys.path altogether.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH_DIR]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODEL_DIR = "models/smollm2-135m-instruct"
MODEL_NAME = "smollm2-135m-instruct"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # the bundled model needs no hub
NO_STORE = {"Cache-Control": "no-store"}  # our response cache would otherwise answer repeats
# Our server with a zero-latency simulator: what is measured is serving cost, not generation.
SIM_SERVER_SETTINGS = [
    "engine.backend=sim",  # explicit: the configured default may be a real engine
    "engine.sim.token_latency_ms=0",
    "engine.sim.prefill_ms_per_token=0",
    "logging.file=",
    "logging.level=WARNING",
    "scheduler.max_concurrency=64",
    "scheduler.max_queue_size=100000",
]


# Chat prompts of about 50 words each; with SmolLM2's chat template (its default system prompt) ~90-100 tokens, under
# one 128-token KV block on the CPU, so the prefix cache never skips a prompt's prefill.
PROMPTS = [
    "You are helping a small team plan a weekend hiking trip in the mountains. Describe, step by step, how "
    "they should prepare: what to pack, how to check the weather, how to choose a safe trail, what to eat, "
    "and how to stay in touch if someone gets lost. Be detailed and practical.",
    "Explain to a new employee how the office coffee machine, the shared printer and the meeting room "
    "booking system work. Cover the common mistakes people make, what to do when something breaks, and who "
    "to ask for help. Write it as a friendly, detailed guide with several numbered steps.",
    "Write a long story about a lighthouse keeper on a remote island who finds a message in a bottle. "
    "Describe the island, the keeper's daily routine, the storm that brings the bottle, what the message "
    "says, and what the keeper decides to do next. Use vivid details and some dialogue.",
    "A student wants to learn to cook simple, healthy meals on a small budget. Give a detailed weekly plan "
    "with breakfast, lunch and dinner ideas, a shopping list, tips for storing leftovers, and advice on "
    "which kitchen tools are worth buying first. Explain your reasons for each choice.",
    "Describe how a city could reduce traffic in its centre over the next five years. Discuss public "
    "transport, cycling lanes, parking prices, delivery vans and working from home. For each idea, explain "
    "the benefits, the costs, who might object, and how the city could win them over.",
    "Teach a beginner how to care for houseplants. Explain light, watering, soil, pots, fertiliser and "
    "pests, and describe five easy plants for a dark flat with their needs. Finish with a checklist the "
    "beginner can follow every week to keep the plants healthy through the whole year.",
    "Imagine you are a tour guide in an old European town. Give a detailed walking tour: where it starts, "
    "the buildings and squares on the way, a short history of each, a good place for lunch, and advice for "
    "visitors about tickets, opening hours, comfortable shoes and the best time of day.",
    "Explain how to prepare for a job interview at a software company. Cover researching the company, "
    "practising coding questions, talking about past projects, questions to ask the interviewers, what to "
    "wear, and how to follow up afterwards. Give concrete examples for every step of the way.",
]


# ----------------------------------------------------------------------------- output


class Progress:
    """A tqdm bar on stderr, updated with absolute values (seconds or requests done so far).
    Off a terminal it redraws rarely, so a log file gets a handful of lines per phase."""

    def __init__(self, label: str, total: float, unit: str = "") -> None:
        from tqdm import tqdm

        self.label, self.total, self.unit = label, total, unit
        is_float = isinstance(total, float)
        counts = "{n:.1f}/{total:.1f}" if is_float else "{n_fmt}/{total_fmt} "
        self._interval = 0.2 if sys.stderr.isatty() else 15.0
        self._drawn = 0.0
        self._bar = tqdm(
            total=total or None,
            desc=f"  [{label}]",
            unit=unit or "it",
            file=sys.stderr,
            leave=True,
            mininterval=self._interval,
            dynamic_ncols=True,
            bar_format="{desc} {percentage:3.0f}%|{bar:20}| " + counts + unit + " [{elapsed}<{remaining}]{postfix}",
        )
        self._start = time.monotonic()

    def update(self, done: float, extra: str = "") -> None:
        self._bar.n = min(done, self.total) if self.total else done
        if extra:
            self._bar.set_postfix_str(extra, refresh=False)
        now = time.monotonic()
        if now - self._drawn >= self._interval:
            self._drawn = now
            self._bar.refresh()

    def done(self, extra: str = "", final: float | None = None) -> None:
        """Complete the bar; `final` ends it there instead (a wait that ended before its limit)."""
        if final is not None:
            self._bar.total = self.total = final
        self._bar.n = self.total
        self._bar.set_postfix_str(extra or f"({time.monotonic() - self._start:.1f}s)", refresh=False)
        self._bar.close()  # draws the final state once


def note(message: str) -> None:
    """Narration goes to stderr with the progress bars (tqdm.write keeps it off an open bar's line);
    stdout keeps only the results."""
    try:
        from tqdm import tqdm
    except ImportError:
        print(message, file=sys.stderr, flush=True)
        return
    tqdm.write(message, file=sys.stderr)


async def timed_sleep(label: str, seconds: float) -> None:
    bar, start = Progress(label, float(seconds), "s"), time.monotonic()
    while (left := seconds - (time.monotonic() - start)) > 0:
        await asyncio.sleep(min(0.5, left))
        bar.update(round(time.monotonic() - start, 1))
    bar.done()


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]], notes: Sequence[str] = ()) -> str:
    """A plain-text table: first column left-aligned (a label), the rest right-aligned (numbers)."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def fmt(row: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

    rule = "-" * len(fmt(cells[0]))
    return "\n".join([title, rule, fmt(cells[0]), rule, *(fmt(r) for r in cells[1:]), rule, *notes])


def git_head() -> str:
    """The commit measured, marked when the work tree has changes: numbers belong to code."""
    try:
        head, dirty = (
            subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=5).stdout.strip()
            for cmd in (["rev-parse", "--short", "HEAD"], ["status", "--porcelain", "--untracked-files=no"])
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + ("+changes" if dirty else "")


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    """`kill` stops a benchmark like Ctrl-C does, so its finally blocks stop the servers."""
    signal.signal(signal.SIGTERM, _raise_interrupt)


# ----------------------------------------------------------------------------- statistics


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks, q in [0, 100]; nan for no values."""
    if not sorted_values:
        return float("nan")
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = (len(sorted_values) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass
class Stats:
    n: int
    p50: float
    p99: float
    mean: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Stats:
        s = sorted(values)
        if not s:
            return cls(0, float("nan"), float("nan"), float("nan"), float("nan"))
        return cls(len(s), percentile(s, 50), percentile(s, 99), sum(s) / len(s), s[-1])


def ensure_model() -> None:
    """vLLM's own server needs the converted model folder, which our app creates only on its first
    start: on a fresh machine it would fail to start beside ours."""
    if not (ROOT / MODEL_DIR / ".converted").exists():
        note("converting the bundled model once (about 25 s) ...")
        os.environ.update(OFFLINE_ENV)
        from engine.model_files import resolve_model

        resolve_model(f"bundled:{MODEL_NAME}", ROOT / "models")
