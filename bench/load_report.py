"""The report of bench/load.py: the summaries (bench/load_summary.py) turned into tables (text and
Markdown), PASS/MISS targets, the before/after table, plots (bench/load_plots.py) and a JSON dump
that can regenerate them. Definitions are in docs/BENCHMARKS.md; the notes under each table repeat
the essentials."""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import Stats, note
from bench.load_eta import eta_table
from bench.load_plots import plot
from bench.load_records import high_alone, mixed
from bench.load_summary import CLASSES, TRADEOFF_TPOT_S, Slo, Summary, summarize, tradeoff
from bench.report import Table, check_row, ms, num

if TYPE_CHECKING:
    from bench.calibration import Calibration
    from bench.load_records import Run

MARK_START = "<!-- load-results:start -->"
MARK_END = "<!-- load-results:end -->"
# ----------------------------------------------------------------------------- tables


def calibration_table(cals: list[Calibration], slo_tpot: float, on: str) -> Table:
    concurrencies = sorted({lv.concurrency for cal in cals for lv in cal.levels})

    def cell(cal: Calibration, c: int) -> str:
        lv = next((lv for lv in cal.levels if lv.concurrency == c), None)
        return "-" if lv is None else f"{num(lv.rps)} @ {ms(lv.tpot_p50_s)}"

    rows: list[list[object]] = [
        [
            cal.server,
            f"{cal.load:g}x",
            f"{cal.c_slo:.2f}",
            *(cell(cal, c) for c in concurrencies),
            ms(cal.single_ttft_s or math.nan),
            f"{len(cal.stalls_s)} ({sum(cal.stalls_s):.1f} s)",
        ]
        for cal in cals
    ]
    return Table(
        f"Calibration before each run: {on}, closed loop (req/s @ TPOT p50 ms, by concurrency)",
        ["before", "load", "C_slo", *(f"c={c}" for c in concurrencies), "alone TTFT ms", "machine stalls"],
        rows,
        [
            "req/s = concurrency / mean E2E of the requests sent and finished at that concurrency (Little's "
            "law, no think time)",
            f"C_slo: req/s where TPOT p50 reaches {slo_tpot:g} s (Theil-Sen lines through TPOT and E2E "
            "against concurrency); the run that follows is offered its multiple of it",
            "alone TTFT: one request with nothing else running (the no-queue baseline); machine stalls: "
            "pauses over 100 ms seen by an idle probe (count, total)",
        ],
    )


def results_table(runs: list[Run], sums: dict[tuple[str, float, str], Summary]) -> Table:
    on = LABELS[baseline(runs)]
    rows: list[list[object]] = []
    for run in runs:
        for cls in CLASSES:
            s = sums[(run.server, run.load, cls)]
            whole = cls == "all"
            first = cls == "high"
            rows.append(
                [
                    run.server if first else "",
                    f"{run.load:g}x" if first else "",
                    f"{run.c_slo:.2f}" if first else "",
                    cls,
                    f"{s.completed}/{s.sent}",
                    ms(s.ttft.p50),
                    ms(s.ttft.p99),
                    ms(s.tpot.p50),
                    ms(s.tpot.p99),
                    num(s.e2e.p99, ".1f"),
                    num(s.rps),
                    num(s.tok_s, ".0f"),
                    num(s.on_time_rps),
                    num(s.on_time_rps / run.c_slo),
                    f"{s.refused_429} ({s.refused_429_retry_after})",
                    s.stream_errors,
                    s.other_failures,
                    num(s.max_waiting, "d") if whole else "",
                    f"{s.mem_gb[0]:.2f}-{s.mem_gb[1]:.2f}" if whole and s.mem_gb else "",
                ]
            )
    return Table(
        "Open-loop Poisson load, by server, load and class",
        [
            "server",
            "load",
            "C_slo",
            "class",
            "done/sent",
            "TTFT p50 ms",
            "TTFT p99 ms",
            "TPOT p50 ms",
            "TPOT p99 ms",
            "E2E p99 s",
            "req/s",
            "tok/s",
            "on-time/s",
            "on-time / C_slo",
            "429 (RA)",
            "stream err",
            "other",
            "max wait",
            "mem GB",
        ],
        rows,
        [
            f"C_slo: req/s, calibrated on {on} just before this run; the run was offered load x C_slo",
            "req/s, tok/s: completed requests and their tokens over the time from the first send to the last completion",
            "on-time/s: completed, TPOT <= objective, TTFT <= its class's promise; over the sending time; "
            "on-time / C_slo: the same in units of the machine's capacity at the time (what the targets compare)",
            "429 (RA): refused with HTTP 429 before the stream opened (of which with Retry-After); stream err: an error "
            "chunk inside a 200 stream; other: any other failure (other status, time-out, broken stream)",
            "max wait: most requests waiting in the server's queue (ours: /v1/queue/status waiting_total; vLLM: "
            "vllm:num_requests_waiting); mem: RSS of the server's process tree (shared pages counted per process)",
        ],
    )


def c_slo_text(runs: list[Run]) -> str:
    lo, hi = min(r.c_slo for r in runs), max(r.c_slo for r in runs)
    return f"C_slo {lo:.2f} req/s" if math.isclose(lo, hi) else f"C_slo {lo:.2f}-{hi:.2f} req/s (calibrated per run)"


LABELS = {"vllm-fcfs": "vLLM FCFS", "vllm-priority": "vLLM priority", "llama.cpp": "llama.cpp's server"}


def baseline(runs: list[Run]) -> str:
    """The engine's own server the others are compared with: vLLM FCFS, or llama.cpp's server."""
    return "llama.cpp" if any(r.server == "llama.cpp" for r in runs) else "vllm-fcfs"


def _at(runs: list[Run], server: str, load: float) -> Run | None:
    return next((r for r in runs if r.server == server and math.isclose(r.load, load)), None)


def light_load_rows(runs: list[Run], sums: dict[tuple[str, float, str], Summary]) -> list[list[object]]:
    """#40 below capacity: each class's TTFT p50 and p99 against the engine's own server's (at 1x
    each class's on-time rate per C_slo, `at_capacity_rows`)."""
    rows: list[list[object]] = []
    base = baseline(runs)
    for load in (0.3, 0.7):
        if not (_at(runs, "ours", load) and _at(runs, base, load)):
            continue
        for cls in ("high", "low"):
            o, f = sums[("ours", load, cls)], sums[(base, load, cls)]
            if not (o.completed and f.completed):
                continue  # a class not sent (--only)
            for q, times, plus in (("p50", 1.2, 0.05), ("p99", 1.5, 0.1)):
                ours, theirs = getattr(o.ttft, q), getattr(f.ttft, q)
                rows.append(
                    check_row(
                        f"{load:g}x: ours {cls} TTFT {q}",
                        f"<= {times:g}x {LABELS[base]} + {plus * 1000:.0f} ms",
                        f"{ms(ours)} vs {ms(theirs)} ms",
                        ours <= times * theirs + plus,
                    )
                )
    return rows


def at_capacity_rows(runs: list[Run], sums: dict[tuple[str, float, str], Summary]) -> list[list[object]]:
    rows: list[list[object]] = []
    base = baseline(runs)
    o, f = _at(runs, "ours", 1.0), _at(runs, base, 1.0)
    if o and f:
        for cls in ("high", "low"):
            if not (sums[("ours", 1.0, cls)].sent and sums[(base, 1.0, cls)].sent):
                continue
            ours, theirs = sums[("ours", 1.0, cls)].on_time_rps / o.c_slo, sums[(base, 1.0, cls)].on_time_rps / f.c_slo
            rows.append(
                check_row(
                    f"1x: ours {cls} on-time (per C_slo)",
                    f">= {LABELS[base]}",
                    f"{ours:.2f} vs {theirs:.2f}",
                    ours >= theirs,
                )
            )
    return rows


def top_rows(runs: list[Run], sums: dict[tuple[str, float, str], Summary]) -> list[list[object]]:
    """#40 at 5x: on time, high TTFT p99 against vLLM's priority policy, high on time against the
    level's highs sent alone to the engine's own server in the same run (--high-alone)."""
    o = _at(runs, "ours", 5.0)
    if not o:
        return []
    oh = sums[("ours", 5.0, "high")]
    on_time = sums[("ours", 5.0, "all")].on_time_rps / o.c_slo
    rows = [check_row("5x: ours on-time req/s", ">= 0.5 x C_slo", f"{on_time:.2f} x C_slo", on_time >= 0.5)]
    if _at(runs, "vllm-priority", 5.0) and oh.completed:
        theirs = sums[("vllm-priority", 5.0, "high")].ttft.p99
        rows.append(
            check_row(
                "5x: ours high TTFT p99",
                "<= vLLM priority",
                f"{num(oh.ttft.p99, '.3f')} vs {num(theirs, '.3f')} s",
                oh.ttft.p99 <= theirs,
            )
        )
    alone = _at(runs, high_alone(baseline(runs)), 5.0)
    if alone and oh.sent:
        ours, theirs = oh.on_time_rps / o.c_slo, sums[(alone.server, 5.0, "high")].on_time_rps / alone.c_slo
        rows.append(
            check_row(
                "5x: ours high on-time (per C_slo)",
                f">= high alone on {LABELS[baseline(runs)]}",
                f"{ours:.2f} vs {theirs:.2f}",
                ours >= theirs,
            )
        )
    return rows


def targets_table(runs: list[Run], sums: dict[tuple[str, float, str], Summary], slo: Slo) -> Table:
    """Rates are compared in units of each run's own C_slo: on this machine the capacity moves
    between two runs a minute apart, and a server measured in a fast spell would win on luck."""

    def s(server: str, load: float, cls: str = "all") -> Summary | None:
        return sums[(server, load, cls)] if _at(runs, server, load) else None

    def c(server: str, load: float) -> float:
        run = _at(runs, server, load)
        return run.c_slo if run else math.nan

    rows: list[list[object]] = []
    base = baseline(runs)
    label = LABELS[base]
    o, f = s("ours", 0.7), s(base, 0.7)
    if o and f:
        ot, ft = o.tok_s / c("ours", 0.7), f.tok_s / c(base, 0.7)
        rows.append(
            check_row(f"0.7x: ours tok/s vs {label} (per C_slo)", ">= 0.97x", f"{ot:.1f} vs {ft:.1f}", ot >= 0.97 * ft)
        )
        rows.append(
            check_row(
                "0.7x: ours TTFT p50 (all)",
                f"<= 1.2x {label} + 50 ms",
                f"{ms(o.ttft.p50)} vs {ms(f.ttft.p50)} ms",
                o.ttft.p50 <= 1.2 * f.ttft.p50 + 0.05,
            )
        )
    if o:
        rows.append(check_row("0.7x: ours refusals", "0", str(o.refusals), o.refusals == 0))
    rows += at_capacity_rows(runs, sums)
    o, oh, f, p = s("ours", 1.5), s("ours", 1.5, "high"), s(base, 1.5), s("vllm-priority", 1.5)
    if o and oh:
        high_ttft, tpot, on_time = slo.ttft_s["high"], slo.tpot_s, o.on_time_rps / c("ours", 1.5)
        rows.append(
            check_row(
                "1.5x: ours high TTFT p99",
                f"<= {high_ttft:g} s",
                f"{num(oh.ttft.p99, '.3f')} s",
                oh.ttft.p99 <= high_ttft,
            )
        )
        rows.append(
            check_row("1.5x: ours high TPOT p50", f"<= {tpot:g} s", f"{num(oh.tpot.p50, '.3f')} s", oh.tpot.p50 <= tpot)
        )
        rows.append(
            check_row(
                "1.5x: ours on-time req/s",
                ">= 0.7 x C_slo",
                f"{o.on_time_rps:.2f} = {on_time:.2f} x {c('ours', 1.5):.2f}",
                on_time >= 0.7,
            )
        )
        for other, server in ((f, base), (p, "vllm-priority")):
            if other:
                theirs = other.on_time_rps / c(server, 1.5)
                rows.append(
                    check_row(
                        f"1.5x: ours on-time vs {LABELS[server]} (per C_slo)",
                        ">= 1.5x",
                        f"{on_time:.2f} vs {theirs:.2f}",
                        on_time >= 1.5 * theirs,
                    )
                )
        if f:
            ot, ft = o.tok_s / c("ours", 1.5), f.tok_s / c(base, 1.5)
            rows.append(
                check_row(
                    f"1.5x: ours tok/s vs {label} (per C_slo)", ">= 0.6x", f"{ot:.1f} vs {ft:.1f}", ot >= 0.6 * ft
                )
            )
        ok = None if o.max_waiting is None or o.max_queue_size is None else o.max_waiting <= o.max_queue_size
        rows.append(
            check_row("1.5x: ours max waiting", "<= max_queue_size", f"{o.max_waiting} vs {o.max_queue_size}", ok)
        )
        clean = o.refused_429_retry_after
        rows.append(
            check_row(
                "1.5x: ours refusals as 429 + Retry-After",
                ">= 99 %",
                f"{clean}/{o.refusals}" if o.refusals else "no refusals",
                clean >= 0.99 * o.refusals,
            )
        )
    o, oh = s("ours", 3.0), s("ours", 3.0, "high")
    if o and oh:
        on_time = o.on_time_rps / c("ours", 3.0)
        rows.append(check_row("3x: ours on-time req/s", ">= 0.7 x C_slo", f"{on_time:.2f} x C_slo", on_time >= 0.7))
        rows.append(
            check_row(
                "3x: ours high TTFT p99",
                f"<= {slo.ttft_s['high']:g} s",
                f"{num(oh.ttft.p99, '.3f')} s",
                oh.ttft.p99 <= slo.ttft_s["high"],
            )
        )
    rows[:0] = light_load_rows(runs, sums)
    rows += top_rows(runs, sums)
    return Table(
        "Targets (ratios from one run)",
        ["target", "goal", "measured", "result"],
        rows,
        [
            "per C_slo: the rate divided by the C_slo calibrated just before that run (the machine's capacity "
            "then), so a run in a fast spell does not win on luck",
            "n/a: not measured in this run (a load level or server left out, or a figure the server does not report)",
        ],
    )


def tradeoff_table(runs: list[Run], sums: dict[tuple[str, float, str], Summary], slo: Slo) -> Table:
    runs = mixed(runs)
    top, curves = tradeoff(runs, slo)
    tok_s = {r.server: sums[(r.server, top, "all")].tok_s / r.c_slo for r in runs if r.load == top}
    rows: list[list[object]] = [[f"{t:g}", *(num(curves[s][i]) for s in curves)] for i, t in enumerate(TRADEOFF_TPOT_S)]
    rows.append(["tok/s per C_slo (any objective)", *(num(tok_s[s], ".1f") for s in curves)])
    return Table(
        f"Trade-off at {top:g}x: on-time req/s per C_slo by the TPOT objective they are judged by",
        ["TPOT objective s", *curves],
        rows,
        [
            f"ours steers to its configured objective ({slo.tpot_s:g} s) whatever the column; a looser "
            "objective favours the server that admits everything, a tighter one the server that holds the pace",
            "per C_slo: divided by the C_slo calibrated just before the run; tok/s as in the results table",
        ],
    )


def before_after_table(runs: list[Run], sums: dict[tuple[str, float, str], Summary], cal: Calibration | None) -> Table:
    def column(server: str) -> list[str]:
        run = _at(runs, server, 1.5)
        if run is None:
            return ["not run"] * 5
        s = sums[(server, 1.5, "all")]
        crashes = sum(r.crashed for r in runs if r.server == server)
        wait = _queue_wait(server, s, cal)
        return [
            f"{int(run.crashed)} (all levels: {crashes})",
            f"{ms(s.ttft.mean)} ms",
            f"{s.completed / s.sent:.1%}" if s.sent else "-",
            f"{s.mem_gb[0]:.2f}-{s.mem_gb[1]:.2f} GB" if s.mem_gb else "-",
            wait,
        ]

    labels = [
        "service crashes (server process died)",
        "mean TTFT (completed)",
        "success rate (completed / sent)",
        "memory (RSS of the process tree)",
        "mean queue wait",
    ]
    base = baseline(runs)
    before, after = column(base), column("ours")
    return Table(
        f"Before / after at 1.5 x C_slo: {LABELS[base]} alone, then ours in front",
        ["", f"before: {LABELS[base]}", "after: ours"],
        [[lb, b, a] for lb, b, a in zip(labels, before, after)],
        [
            "queue wait, ours: the X-Queue-Wait-Ms header (or the `dispatched queue_wait_ms` comment when the "
            "stream opened while queued), mean over completed requests",
            "queue wait, vLLM: it reports none; estimated as mean TTFT minus the TTFT of one request alone "
            "(calibration), which also counts prefill slowed by the batch",
        ],
    )


def _queue_wait(server: str, s: Summary, cal: Calibration | None) -> str:
    if server == "ours":
        return f"{s.queue_wait_ms.mean:,.0f} ms" if s.queue_wait_ms.n else "-"
    if cal is None or cal.single_ttft_s is None:
        return "n/a (no calibration in this run: no single-request TTFT)"
    return f"~{ms(s.ttft.mean - cal.single_ttft_s)} ms (estimate)"


def _idle_waits(run: Run) -> str:
    seen = [s.idle_wait_s for s in run.samples if s.idle_wait_s]
    if len(seen) < 2:
        return "-"
    per_request = []
    for cls in ("high", "low"):
        sent = sum(1 for r in run.records if r.cls == cls)
        waited = seen[-1].get(cls, 0.0) - seen[0].get(cls, 0.0)
        per_request.append(f"{1000 * waited / sent:.0f}" if sent else "-")
    return " / ".join(per_request)


def _taken_back(run: Run) -> str:
    seen = [s.taken_back for s in run.samples if s.taken_back is not None]
    return str(seen[-1] - seen[0]) if len(seen) > 1 else "-"


def sampled_table(runs: list[Run]) -> Table:
    rows: list[list[object]] = []
    for run in runs:
        limits = [s.concurrency_limit for s in run.samples if s.concurrency_limit is not None]
        tpots = [s.measured_tpot_s for s in run.samples if s.measured_tpot_s is not None]
        set_points = [s.tpot_set_point_s for s in run.samples if s.tpot_set_point_s is not None]
        running = [s.running for s in run.samples if s.running is not None]
        lag = Stats.of([r.sent_s - r.planned_s for r in run.records]).p99
        rows.append(
            [
                run.server,
                f"{run.load:g}x",
                f"{run.rate:.2f}",
                max(running) if running else "-",
                f"{min(limits)}-{max(limits)}" if limits else "-",
                f"{min(tpots):.3f}-{max(tpots):.3f}" if tpots else "-",
                f"{min(set_points):.3f}-{max(set_points):.3f}" if set_points else "-",
                _idle_waits(run),
                _taken_back(run),
                ms(lag),
                f"{len(run.stalls_s)} ({sum(run.stalls_s):.1f} s)",
                "yes" if run.crashed else "no",
            ]
        )
    return Table(
        "Server state sampled every second, the client's send lag, the machine's stalls",
        [
            "server",
            "load",
            "offered req/s",
            "max running",
            "ours: running limit",
            "ours: measured TPOT s",
            "ours: TPOT set point s",
            "ours: idle wait ms per request (high / low)",
            "ours: slots taken back",
            "send lag p99 ms",
            "machine stalls",
            "crashed",
        ],
        rows,
        [
            "running limit: /v1/queue/status slots (the adaptive running limit)",
            "idle wait: seconds the class's requests waited in our queue while the engine had room (free slots "
            "and tokens), over the level (/v1/queue/status idle_wait_s), per request of the class sent",
            "slots taken back: lower requests suspended for high during the level (/v1/queue/status taken_back)",
            "send lag: actual minus planned send time; large values mean the client fell behind the plan",
            "machine stalls: pauses over 100 ms seen by an idle probe process during the level (count, total): "
            "the CPUs were held by others, which holds up server and client too: the level's latencies are disturbed",
        ],
    )


# ----------------------------------------------------------------------------- outputs


def report(meta: dict[str, Any], cals: list[Calibration], runs: list[Run], args: argparse.Namespace) -> None:
    slo = Slo(args.slo_tpot, {"high": args.slo_ttft, "low": args.low_promise})
    sums = {(r.server, r.load, c): summarize(r, c, slo) for r in runs for c in CLASSES}
    cal_15 = next((c for c in cals if c.server == baseline(runs) and math.isclose(c.load, 1.5)), None)
    tables = ([calibration_table(cals, args.slo_tpot, LABELS[baseline(runs)])] if cals else []) + [
        results_table(runs, sums),
        sampled_table(runs),
        eta_table(runs),
        targets_table(runs, sums, slo),
        tradeoff_table(runs, sums, slo),
        before_after_table(runs, sums, cal_15),
    ]
    for t in tables:
        print()
        print(t.text())
    errors = [f"{r.server} {r.load:g}x: {e}" for r in runs for e in sums[(r.server, r.load, "all")].errors]
    if errors:
        print("\nfirst errors seen:\n  " + "\n  ".join(errors))
    print(f"\ntotal run time {meta.get('run_s', 0):.0f}s")
    if args.json:
        write_json(Path(args.json), meta, cals, runs, sums)
    if args.markdown:
        write_markdown(Path(args.markdown), meta, runs, tables)
    if args.plots:
        plot(Path(args.plots), mixed(runs), sums, slo)


def write_json(
    path: Path,
    meta: dict[str, Any],
    cals: list[Calibration],
    runs: list[Run],
    sums: dict[tuple[str, float, str], Summary],
) -> None:
    def clean(x: Any) -> Any:  # NaN is not JSON
        if isinstance(x, float) and x != x:
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x

    data = {
        "meta": meta,
        "calibrations": [asdict(c) for c in cals],
        "runs": [asdict(r) for r in runs],
        "summaries": [{"server": k[0], "load": k[1], "class": k[2], **asdict(v)} for k, v in sums.items()],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(clean(data), indent=1) + "\n")
    note(f"wrote {path}")


def read_json(path: Path) -> tuple[dict[str, Any], list[Calibration], list[Run]]:
    """A --json file back into the objects report() takes: tables, Markdown and plots again,
    without running anything (also with other objectives: --slo-tpot and friends apply)."""
    from bench.calibration import Calibration, Level
    from bench.load_records import Record, Run, Sample

    data = json.loads(path.read_text())
    nan = float("nan")
    cals = [
        Calibration(
            **{**c, "levels": [Level(**{k: nan if v is None else v for k, v in lv.items()}) for lv in c["levels"]]}
        )
        for c in data["calibrations"]
    ]
    runs = [
        Run(**{**r, "records": [Record(**x) for x in r["records"]], "samples": [Sample(**x) for x in r["samples"]]})
        for r in data["runs"]
    ]
    return data["meta"], cals, runs


def write_markdown(path: Path, meta: dict[str, Any], runs: list[Run], tables: list[Table]) -> None:
    """The results section; a file holding the results markers keeps everything outside them."""
    head = (
        f"Run: {meta['mode']} mode, commit {meta['commit']}, {meta['cpus']} CPUs {meta['machine']}, KV cache "
        f"{meta['kv_cache_bytes'] / 2**20:.0f} MiB per server, seed {meta['seed']}, {meta['duration_s']:g} s of "
        f"sending per level, {c_slo_text(runs)}, run time {meta.get('run_s', 0):.0f} s.\n"
    )
    section = "\n".join([head, *(t.markdown() for t in tables)])
    text = path.read_text() if path.exists() else ""
    if MARK_START in text and MARK_END in text:
        before, rest = text.split(MARK_START, 1)
        text = before + MARK_START + "\n" + section + "\n" + MARK_END + rest.split(MARK_END, 1)[1]
    else:
        text = section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    note(f"wrote {path}")
