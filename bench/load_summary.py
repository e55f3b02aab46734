"""bench/load.py's records summarised: per server, load and class, the completions, latencies,
rates, on-time count against the objectives and the refusals (`Summary`); and the on-time curve
had the run been judged by other TPOT objectives. Definitions are in docs/BENCHMARKS.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bench.common import Stats

if TYPE_CHECKING:
    from bench.load_records import Record, Run

CLASSES = ("high", "low", "all")


@dataclass
class Slo:
    tpot_s: float
    ttft_s: dict[str, float]  # the first-token promise per class

    def on_time(self, r: Record) -> bool:
        """Completed, every token after the first on pace, and the first one within the promise."""
        return (
            completed(r)
            and r.ttft_s is not None
            and r.ttft_s <= self.ttft_s[r.cls]
            and (r.tpot_s is None or r.tpot_s <= self.tpot_s)
        )


@dataclass
class Summary:
    sent: int
    completed: int
    ttft: Stats
    tpot: Stats
    e2e: Stats
    rps: float
    tok_s: float
    on_time: int
    on_time_rps: float
    refused_429: int
    refused_429_retry_after: int
    stream_errors: int
    other_failures: int
    queue_wait_ms: Stats
    send_lag_p99_s: float
    max_waiting: int | None = None
    mem_gb: tuple[float, float] | None = None
    max_queue_size: int | None = None
    crashed: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def refusals(self) -> int:
        return self.refused_429 + self.stream_errors + self.other_failures


def completed(r: Record) -> bool:
    return r.status == 200 and not r.error_kind


def summarize(run: Run, cls: str, slo: Slo) -> Summary:
    """One server x load x class (or "all"). Rates: completions over the time from the first send
    to the last completion (the drain after sending counts); on-time over the sending time."""
    records = [r for r in run.records if cls in ("all", r.cls)]
    done = [r for r in records if completed(r)]
    span = max([run.duration_s, *((r.sent_s + (r.e2e_s or 0.0)) for r in done)])
    waits = [s.waiting for s in run.samples if s.waiting is not None]
    rss = [s.rss_bytes / 1e9 for s in run.samples if s.rss_bytes]
    on_time = sum(slo.on_time(r) for r in records)
    refused = [r for r in records if r.status == 429]
    return Summary(
        sent=len(records),
        completed=len(done),
        ttft=Stats.of([r.ttft_s for r in done if r.ttft_s is not None]),
        tpot=Stats.of([r.tpot_s for r in done if r.tpot_s is not None]),
        e2e=Stats.of([r.e2e_s for r in done if r.e2e_s is not None]),
        rps=len(done) / span,
        tok_s=sum(r.completion_tokens or 0 for r in done) / span,
        on_time=on_time,
        on_time_rps=on_time / run.duration_s,
        refused_429=len(refused),
        refused_429_retry_after=sum(r.retry_after for r in refused),
        stream_errors=sum(r.error_kind == "stream" for r in records),
        other_failures=sum(bool(r.error_kind) and r.status != 429 and r.error_kind != "stream" for r in records),
        queue_wait_ms=Stats.of([r.queue_wait_ms for r in done if r.queue_wait_ms is not None]),
        send_lag_p99_s=Stats.of([r.sent_s - r.planned_s for r in records]).p99,
        max_waiting=max(waits) if waits else None,
        mem_gb=(min(rss), max(rss)) if rss else None,
        max_queue_size=next((s.max_queue_size for s in run.samples if s.max_queue_size is not None), None),
        crashed=run.crashed,
        errors=sorted({r.error[:120] for r in records if r.error})[:3],
    )


TRADEOFF_TPOT_S = (0.06, 0.08, 0.1, 0.125, 0.15, 0.2, 0.3)


def tradeoff(runs: list[Run], slo: Slo) -> tuple[float, dict[str, list[float]]]:
    """At the highest load: each server's on-time req/s per C_slo had it been judged by another TPOT
    objective (first-token promises unchanged). Ours still steers to its own; where the curves cross
    is where holding the objective stops paying for the throughput it costs."""
    top = max(r.load for r in runs)
    curves = {
        r.server: [
            sum(Slo(t, slo.ttft_s).on_time(x) for x in r.records) / r.duration_s / r.c_slo for t in TRADEOFF_TPOT_S
        ]
        for r in runs
        if r.load == top
    }
    return top, curves
