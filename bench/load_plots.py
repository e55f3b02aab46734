"""bench/load.py's plots (PNG, with matplotlib when installed): TTFT p99, on-time and output
rates against offered load, and the on-time trade-off against the TPOT objective."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common import ROOT, note
from bench.load_summary import TRADEOFF_TPOT_S, Slo, Summary, tradeoff

if TYPE_CHECKING:
    from bench.load_records import Run


def plot(folder: Path, runs: list[Run], sums: dict[tuple[str, float, str], Summary], slo: Slo) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        note("matplotlib is not installed (pip install -r requirements-bench.txt): no plots")
        return
    folder = folder if folder.is_absolute() else ROOT / folder
    folder.mkdir(parents=True, exist_ok=True)
    servers = list(dict.fromkeys(r.server for r in runs))
    figures: list[tuple[str, str, Callable[[Summary, Run], float], tuple[str, ...], bool]] = [
        ("load-ttft-p99.png", "TTFT p99 (s), log scale", lambda s, r: s.ttft.p99, ("high", "low"), True),
        ("load-on-time.png", "on-time req/s / C_slo", lambda s, r: s.on_time_rps / r.c_slo, ("all",), False),
        ("load-tok-s.png", "output tok/s / C_slo", lambda s, r: s.tok_s / r.c_slo, ("all",), False),
    ]
    for name, ylabel, value, classes, log in figures:
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        for i, server in enumerate(servers):
            mine = sorted((r for r in runs if r.server == server), key=lambda r: r.load)
            for cls in classes:
                label = server if cls == "all" else f"{server} {cls}"
                ax.plot(
                    [r.load for r in mine],
                    [value(sums[(server, r.load, cls)], r) for r in mine],
                    marker="o",
                    label=label,
                    color=f"C{i}",
                    linestyle="--" if cls == "low" else "-",
                )
        if name == "load-on-time.png":  # what a perfect server would answer on time: all that was sent
            loads = sorted({r.load for r in runs})
            ax.plot(loads, loads, color="grey", linestyle=":", label="sent")
        ax.set_title(f"bench/load.py: {ylabel.split(' (')[0]} against offered load", fontsize=10)
        ax.set_xlabel("offered load (x C_slo)")
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(folder / name, dpi=110)
        plt.close(fig)
    top, curves = tradeoff(runs, slo)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, server in enumerate(servers):
        if server in curves:
            ax.plot(TRADEOFF_TPOT_S, curves[server], marker="o", label=server, color=f"C{i}")
    ax.axvline(slo.tpot_s, color="grey", linestyle=":", label="ours' objective")
    ax.set_title(f"bench/load.py: on-time req/s per C_slo at {top:g}x against the TPOT objective", fontsize=10)
    ax.set_xlabel("TPOT objective judged by (s)")
    ax.set_ylabel("on-time req/s / C_slo")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "load-tradeoff.png", dpi=110)
    plt.close(fig)
    note(f"wrote {', '.join(str(folder / f[0]) for f in figures)}, {folder / 'load-tradeoff.png'}")
