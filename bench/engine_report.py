"""The report of bench/engine.py: per concurrency, ours against the engine's own server
(throughput, TTFT, decode speed, CPU per token), the PASS/MISS summary and the notes on noise."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence

from bench.common import MODEL_NAME, Stats, table
from bench.engine_cells import CONCURRENCIES, MAX_TOKENS, TEMPERATURE, Cell, Plan
from bench.servers import ServerProcess

THROUGHPUT_RATIO_TARGET = 0.95
ADDED_TTFT_TARGET_MS = 10.0
FOREIGN_WARN_PCT = 10.0  # other processes' CPU (% of one core) above which the summary flags noise


def ms(value: float) -> str:
    return f"{value * 1000:.1f}" if value == value else "-"


def report(
    cells: list[Cell],
    plan: Plan,
    servers: Sequence[ServerProcess],
    started: float,
    load_before: float,
    ours_settings: Sequence[str],
    ours_extra: Sequence[str],
) -> None:
    def pick(name: str, c: int) -> list[Cell]:
        return [x for x in cells if x.server == name and x.concurrency == c]

    peer = servers[1].name
    rows, summary, cpu_rows = [], [], []
    token_means: list[str] = []
    for c in CONCURRENCIES:
        agg: dict[str, dict] = {}
        for name in ("ours", peer):
            group = pick(name, c)
            ok = [s for x in group for s in x.ok]
            wall = sum(x.wall_s for x in group)
            tokens = sum(x.tokens for x in group)
            agg[name] = {
                "n": len(ok),
                "errors": sum(len(x.samples) - len(x.ok) for x in group),
                "tps": tokens / wall if wall else 0.0,
                "ttft": Stats.of([s.ttft_s for s in ok]),
                "tok_req": tokens / len(ok) if ok else 0.0,
                "decode": statistics.median(
                    [(s.tokens - 1) / s.decode_s for s in ok if s.decode_s > 0 and s.tokens > 1] or [float("nan")]
                ),
                "per_round": {x.round: x.tok_per_s for x in group},
                "ttft_round": {x.round: Stats.of([s.ttft_s for s in x.ok]).p50 for x in group},
                "front_ms_tok": 1000 * sum(x.front_cpu_s for x in group) / tokens if tokens else float("nan"),
                "engine_ms_tok": 1000 * sum(x.engine_cpu_s for x in group) / tokens if tokens else float("nan"),
                "client_ms_tok": 1000 * sum(x.client_cpu_s for x in group) / tokens if tokens else float("nan"),
                "idle_pct": 100 * sum(x.idle_cpu_s for x in group) / wall if wall else float("nan"),
                "foreign_pct": 100 * sum(x.foreign_cpu_s for x in group) / wall if wall else float("nan"),
            }
        o, v = agg["ours"], agg[peer]
        ratio = o["tps"] / v["tps"] if v["tps"] else float("nan")
        round_ratios = [o["per_round"][r] / v["per_round"][r] for r in o["per_round"] if v["per_round"].get(r)]
        added = (o["ttft"].p50 - v["ttft"].p50) * 1000
        round_added = [
            (o["ttft_round"][r] - v["ttft_round"][r]) * 1000 for r in o["ttft_round"] if r in v["ttft_round"]
        ]
        rows.append(
            [
                c,
                f"{o['n']}/{v['n']}",
                f"{o['tps']:.1f}",
                f"{v['tps']:.1f}",
                f"{ratio:.3f}",
                f"{min(round_ratios):.2f}-{max(round_ratios):.2f}" if round_ratios else "-",
                ms(o["ttft"].p50),
                ms(v["ttft"].p50),
                f"{added:+.1f}",
                f"{min(round_added):+.0f}..{max(round_added):+.0f}" if round_added else "-",
                ms(o["ttft"].p99),
                ms(v["ttft"].p99),
            ]
        )
        token_means.append(f"c={c} {o['tok_req']:.1f}/{v['tok_req']:.1f}")
        cpu_rows.append(
            [
                c,
                f"{o['front_ms_tok']:.2f}",
                f"{v['front_ms_tok']:.2f}",
                f"{o['front_ms_tok'] - v['front_ms_tok']:+.2f}",
                f"{o['engine_ms_tok']:.2f}",
                f"{v['engine_ms_tok']:.2f}",
                f"{o['client_ms_tok']:.2f}/{v['client_ms_tok']:.2f}",
                f"{v['idle_pct']:.1f}/{o['idle_pct']:.1f}",
                f"{o['foreign_pct']:.1f}/{v['foreign_pct']:.1f}",
            ]
        )
        if c == 1:
            decode_ratio = o["decode"] / v["decode"] if v["decode"] else float("nan")
            rows.append(
                [
                    "1 (decode/stream)",
                    "",
                    f"{o['decode']:.1f}",
                    f"{v['decode']:.1f}",
                    f"{decode_ratio:.3f}",
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                ]
            )
            summary.append(["single-stream decode tok/s ratio", "(info)", f"{decode_ratio:.3f}", "-"])
        summary.append(
            [
                f"throughput ours/{peer} @ c={c}",
                f">= {THROUGHPUT_RATIO_TARGET:g}",
                f"{ratio:.3f}",
                "PASS" if ratio >= THROUGHPUT_RATIO_TARGET else "MISS",
            ]
        )
        summary.append(
            [
                f"added TTFT p50 @ c={c}",
                f"< {ADDED_TTFT_TARGET_MS:g} ms",
                f"{added:+.1f} ms",
                "PASS" if added < ADDED_TTFT_TARGET_MS else "MISS",
            ]
        )
        if o["errors"] or v["errors"]:
            summary.append([f"failed requests @ c={c}", "0", f"{o['errors']}/{v['errors']}", "MISS"])

    errors = [
        f"{x.server} c={x.concurrency} round {x.round + 1}: {s.error}" for x in cells for s in x.samples if s.error
    ][:3]
    n_per = {c: plan.per_worker[c] * c * plan.rounds for c in CONCURRENCIES}
    print()
    print(
        table(
            f"Streaming chat completions, {MODEL_NAME}, max_tokens={MAX_TOKENS}, temperature {TEMPERATURE:g}, "
            f"fixed seeds (ours vs {peer}'s own server)",
            [
                "conc",
                "req o/v",
                "tok/s ours",
                f"tok/s {peer}",
                "ratio",
                "per round",
                "TTFT p50 ours",
                f"TTFT p50 {peer}",
                "added p50 ms",
                "per round",
                "TTFT p99 ours",
                f"TTFT p99 {peer}",
            ],
            rows,
            [
                "tok/s: aggregate output tokens/s (usage.completion_tokens / cell wall time, pooled over rounds); "
                "'decode/stream' row: single-stream decode tok/s at c=1, median over requests",
                f"ratio = ours / {peer}; 'per round' = lowest-highest ratio (or added p50) over the alternating rounds: "
                "the noise; TTFT in ms to the first non-empty content chunk",
                "at c>1 every cell starts with c simultaneous requests: vLLM prefills the first arrival alone and the "
                "rest together one step later, so TTFT there is mostly engine batching and swings by 100+ ms per round",
                f"{plan.rounds} rounds; requests per server: "
                + ", ".join(f"c={c} {n}" for c, n in n_per.items())
                + " (TTFT p99 over so few samples is close to the max)",
                f"mean generated tokens per request ours/{peer}: " + ", ".join(token_means),
                *(f"error: {e}" for e in errors),
            ],
        )
    )
    print()
    print(
        table(
            "CPU time per output token (ms, from /proc), same cells",
            [
                "conc",
                "front ours",
                f"front {peer}",
                "front diff",
                "engine ours",
                f"engine {peer}",
                "client o/v",
                "idle other % o/v",
                "foreign % o/v",
            ],
            cpu_rows,
            [
                "front: the server's API process (HTTP, SSE, tokenizer, AsyncLLM output processing/detokenising; "
                "ours also the scheduler); engine: its EngineCore + worker processes",
                f"client: this script; idle other %: the idle server's CPU (% of one core) while ours / {peer} ran; "
                f"foreign %: the rest of the machine; {os.cpu_count()} CPUs, vLLM pins its worker to one",
                "vLLM's server also writes one uvicorn access-log line per request (ours runs at WARNING)",
                "ours: app.py "
                + " ".join(f"--set {x}" for x in [*ours_settings, *ours_extra])
                + "; requests carry Cache-Control: no-store",
            ],
        )
    )
    wall = sum(x.wall_s for x in cells)
    foreign = 100 * sum(x.foreign_cpu_s for x in cells) / wall if wall else 0.0
    if foreign > FOREIGN_WARN_PCT:
        summary.append(
            ["other processes' CPU while measuring", f"< {FOREIGN_WARN_PCT:g} % of a core", f"{foreign:.0f} %", "NOISY"]
        )
    print()
    load_after = os.getloadavg()[0]
    print(
        table(
            "Summary",
            ["target", "goal", "measured", "result"],
            summary,
            [
                "added TTFT at c=1 is the clean measure of our per-request overhead; at c>1 compare it with "
                "the 'per round' spread above (engine batching noise)",
                f"total run time {time.monotonic() - started:.0f}s (servers ready after "
                + ", ".join(f"{s.name} {s.ready_after_s:.0f}s" for s in servers)
                + f"); load average before/after {load_before:.2f}/{load_after:.2f}",
            ],
        )
    )
