"""What ours told the streams that waited: the first queue notice's estimated wait against the
wait that followed it, per level and class. A waiting user reads that figure (the SSE comment, the
page, /v1/queue/status); an estimate that is far off leaves them waiting blind all the same."""

from __future__ import annotations

from bench.common import percentile
from bench.load_records import Record, Run
from bench.load_summary import CLASSES
from bench.report import Table

_WITHIN = 2.0  # told and waited within this factor of each other
_FLOOR_S = 1.0  # ...or within this many seconds (a notice comes after a second; what is left may be little)


def eta_table(runs: list[Run]) -> Table:
    rows: list[list[object]] = []
    for run in runs:
        if run.server != "ours":
            continue
        for cls in CLASSES:
            told = [r for r in run.records if r.cls == cls and r.notice_s is not None]
            if told:
                rows.append([f"{run.load:g}x", cls, *_row(told)])
    return Table(
        "What ours told the streams that waited: the first queue notice's estimated wait, against the wait after it",
        [
            "load",
            "class",
            "streams told",
            "unknown",
            "told p50 s",
            "waited p50 s",
            "waited / told p10 / p50 / p90",
            f"within {_WITHIN:g}x or {_FLOOR_S:g} s",
        ],
        rows,
        [
            "told: estimated_wait_s of the first `: queue position=N estimated_wait_s=X` comment (a stream gets one "
            "each second it waits); waited: from that comment to the `: dispatched` one, both timed by the client",
            "unknown: notices that said so (nothing had finished yet to estimate from)",
        ],
    )


def _row(told: list[Record]) -> list[object]:
    pairs = [(r.eta_s, r.waited_after_notice_s) for r in told if r.eta_s is not None and r.waited_after_notice_s]
    ratios = sorted(w / max(t, 1e-3) for t, w in pairs)
    close = sum(1 for t, w in pairs if abs(w - t) <= _FLOOR_S or 1 / _WITHIN <= w / max(t, 1e-3) <= _WITHIN)
    p = percentile
    return [
        len(told),
        sum(1 for r in told if r.eta_s is None),
        f"{p(sorted(t for t, _ in pairs), 50):.1f}" if pairs else "-",
        f"{p(sorted(w for _, w in pairs), 50):.1f}" if pairs else "-",
        " / ".join(f"{p(ratios, q):.2f}" for q in (10, 50, 90)) if ratios else "-",
        f"{close}/{len(pairs)}" if pairs else "-",
    ]
