"""Similar-question cache benchmark: hit and false-hit rates per threshold on the labelled pairs,
lookup time and index memory at 100,000 entries, and replayed workloads over the exact cache.

    .venv/bin/python bench/similar_cache.py            # about 2-4 minutes on 2 cores
    .venv/bin/python bench/similar_cache.py --quick    # 10,000 entries, shorter replays

Part 1, the pairs (bench/data/similar_pairs.jsonl, made by bench/make_similar_pairs.py): each
  pair's first text is stored in an index, the second looked up, exactly as the server does it
  (cache/similar_index.py: MinHash LSH candidates, Jaccard of the shingles, then the guards).
  Per threshold and method ("lexical": LSH + Jaccard only; "lexical + guards": what ships): the
  hit rate on `share` pairs (recall), the false-hit rate on `differ` pairs, and precision.
Part 2, scale: an index of N entries (100,000; 50 partitions) filled from the same templates
  with distinct fillers, then lookups of paraphrases of stored texts (hits) and of unseen texts
  (misses): p50/p99 per lookup, and the memory the index holds (tracemalloc), per 100,000.
  The server's similar hit adds one SQLite read of the answer, as an exact hit does.
Part 3, replays: a template-heavy script workload and a chat workload. Each request picks a
  meaning (a filled template, its hard negatives included as meanings of their own) by a Zipf
  law and a wording (the base text half the time, else one of its paraphrases); the hit rate of
  the exact cache alone against exact + similar, and the wrong answers similar hits served.

No embedding method: no local embedding model is installed and nothing downloads at run time.
A benchmark, not a test: it prints tables and a PASS/MISS summary against the issue's targets.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tqdm import tqdm  # noqa: E402

from bench.common import percentile, table  # noqa: E402
from bench.make_similar_pairs import OUT as PAIRS  # noqa: E402
from bench.make_similar_pairs import TEMPLATES, fill, polite, punctuation, render, typo
from cache.similar_guards import features, refusal  # noqa: E402
from cache.similar_index import SimilarIndex  # noqa: E402
from settings.schema import SimilarCacheConfig  # noqa: E402

THRESHOLDS = [0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95]
DEFAULTS = SimilarCacheConfig()
TARGETS = {"false": 0.005, "hits": 0.40, "p50_ms": 2.0, "p99_ms": 10.0}


def canonical(text: str, context: str = "bench") -> str:
    """A request as cache/keys.py writes it; only the last user text varies within a partition."""
    return json.dumps(
        {
            "v": 1,
            "namespace": context,
            "model": "sim",
            "max_tokens": 256,
            "temperature": 0.0,
            "top_p": None,
            "stop": [],
            "seed": None,
            "reasoning_effort": None,
            "messages": [["system", "You are helpful."], ["user", text]],
        },
        ensure_ascii=False,
        separators=(",", ":"),
        sort_keys=True,
    )


def new_index(max_entries: int, threshold: float = 0.0) -> SimilarIndex:
    return SimilarIndex(max_entries, threshold, DEFAULTS.lsh_threshold, DEFAULTS.num_perm, DEFAULTS.max_candidates)


def part_pairs(rows: list[dict]) -> tuple[str, dict]:
    scored = []  # (label, kind, similarity or None when the LSH did not offer it, guard verdict)
    for row in tqdm(rows, desc="  [pairs]", file=sys.stderr):
        idx = new_index(4)
        idx.add("a", canonical(row["a"]))
        found = idx.candidates(canonical(row["b"]))
        similarity = found[0][0] if found else None
        scored.append((row, similarity, refusal(features(row["a"]), features(row["b"]))))
    share = [s for s in scored if s[0]["label"] == "share"]
    differ = [s for s in scored if s[0]["label"] == "differ"]
    lines, curve = [], {}
    for method, guarded in (("lexical", False), ("lexical + guards", True)):
        for t in THRESHOLDS:

            def hit(s: tuple, t: float = t, guarded: bool = guarded) -> bool:
                return s[1] is not None and s[1] >= t and (not guarded or s[2] is None)

            tp, fp = sum(map(hit, share)), sum(map(hit, differ))
            precision = tp / (tp + fp) if tp + fp else 1.0
            curve[(method, t)] = (tp / len(share), fp / len(differ), precision)
            mark = " <- default" if guarded and abs(t - DEFAULTS.threshold) < 1e-9 else ""
            lines.append(
                [
                    method,
                    f"{t:.2f}{mark}",
                    f"{tp / len(share):.1%}",
                    f"{fp / len(differ):.2%} ({fp})",
                    f"{precision:.2%}",
                ]
            )
    out = table(
        f"Pairs: {len(rows)} ({len(share)} share, {len(differ)} differ), LSH threshold "
        f"{DEFAULTS.lsh_threshold}, {DEFAULTS.num_perm} permutations",
        ["method", "threshold", "hits on share (recall)", "false hits on differ", "precision"],
        lines,
    )
    by_kind = Counter()
    for row, similarity, verdict in scored:
        ok = similarity is not None and similarity >= DEFAULTS.threshold and verdict is None
        by_kind[(row["label"], row["kind"], "n")] += 1
        by_kind[(row["label"], row["kind"], "hit")] += ok
    kinds = sorted({(lab, kind) for lab, kind, _ in by_kind})
    out += "\n" + table(
        f"By kind at the default threshold {DEFAULTS.threshold} (with guards)",
        ["label", "kind", "pairs", "hits"],
        [
            [lab, kind, by_kind[(lab, kind, "n")], f"{by_kind[(lab, kind, 'hit')] / by_kind[(lab, kind, 'n')]:.1%}"]
            for lab, kind in kinds
        ],
    )
    return out, curve


def fillings(rng: random.Random, count: int) -> list[tuple[str, str]]:
    """(lang, text) of `count` distinct filled templates with varied numbers, for the scale test."""
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    while len(out) < count:
        lang, _, clauses = rng.choice(TEMPLATES)
        filled = fill(rng, lang, clauses)
        values = filled[0][0] if filled else {"NEG": ""}
        values = {**values, "N": str(rng.randrange(1, 10**6))}
        text = render(lang, clauses, values) + f" #{rng.randrange(10**6)}"
        if text not in seen:
            seen.add(text)
            out.append((lang, text))
    return out


def part_scale(entries: int, lookups: int) -> tuple[str, dict]:
    rng = random.Random(7)
    texts = fillings(rng, entries + lookups)
    stored, unseen = texts[:entries], texts[entries:]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    idx = new_index(entries, DEFAULTS.threshold)
    for i, (_, text) in enumerate(tqdm(stored, desc="  [fill index]", file=sys.stderr)):
        idx.add(f"k{i}", canonical(text, f"ns{i % 50}"))
    memory = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    queries = []
    for j in range(lookups):
        if j % 2 == 0:
            i = rng.randrange(entries)
            lang, text = stored[i]
            queries.append(("hit", canonical(punctuation(rng, lang, text), f"ns{i % 50}")))
        else:
            queries.append(("miss", canonical(unseen[j][1], f"ns{j % 50}")))
    times: dict[str, list[float]] = {"hit": [], "miss": []}
    cpu: dict[str, list[float]] = {"hit": [], "miss": []}  # this thread's CPU time: without preemption
    found = 0
    for kind, query in tqdm(queries, desc="  [lookups]", file=sys.stderr):
        start, start_cpu = time.perf_counter(), time.thread_time()
        match = idx.match(query)
        times[kind].append((time.perf_counter() - start) * 1000)
        cpu[kind].append((time.thread_time() - start_cpu) * 1000)
        found += kind == "hit" and match is not None
    every, every_cpu = sorted(times["hit"] + times["miss"]), sorted(cpu["hit"] + cpu["miss"])
    result = {
        "p50": percentile(every, 50),
        "p99": percentile(every, 99),
        "memory": memory * 100_000 / entries,
        "cpu_p50": percentile(every_cpu, 50),
        "cpu_p99": percentile(every_cpu, 99),
    }
    rows = [
        [
            kind,
            len(v),
            f"{percentile(sorted(v), 50):.3f}",
            f"{percentile(sorted(v), 99):.3f}",
            f"{percentile(sorted(cpu[kind]), 50):.3f}",
            f"{percentile(sorted(cpu[kind]), 99):.3f}",
        ]
        for kind, v in times.items()
    ]
    rows.append(
        [
            "all",
            len(every),
            f"{result['p50']:.3f}",
            f"{result['p99']:.3f}",
            f"{result['cpu_p50']:.3f}",
            f"{result['cpu_p99']:.3f}",
        ]
    )
    out = table(
        f"Lookup at {entries:,} entries (50 partitions; LSH {DEFAULTS.lsh_threshold}, {DEFAULTS.num_perm} "
        f"permutations, threshold {DEFAULTS.threshold})",
        ["lookups", "n", "p50 ms", "p99 ms", "CPU p50 ms", "CPU p99 ms"],
        rows,
        [
            f"load average while it ran: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
            "(wall time includes waiting for a core; CPU time does not)",
            f"paraphrase lookups found their entry: {found}/{len(times['hit'])}",
            f"index memory: {memory / 2**20:.1f} MiB for {entries:,} entries = "
            f"{result['memory'] / 2**20:.1f} MiB per 100,000 (tracemalloc: MinHash LSH band tables + texts)",
        ],
    )
    return out, result


def part_replay(domain: str, requests: int, meanings_per_template: int) -> list[object]:
    rng = random.Random(11)
    meanings: list[tuple[str, list[str], str]] = []  # (meaning id, wordings, lang)
    for lang, dom, clauses in TEMPLATES:
        if (domain == "script") != (dom == "script"):
            continue
        for _ in range(meanings_per_template):
            filled = fill(rng, lang, clauses)
            for values in [filled[0][0]] + [neg for _, neg, _ in filled]:
                base = render(lang, clauses, values)
                wordings = [
                    base,
                    render(lang, clauses, values, order=list(reversed(range(len(clauses))))),
                    typo(rng, lang, base),
                    punctuation(rng, lang, base),
                    polite(rng, lang, base),
                ]
                meanings.append((base, wordings, lang))  # a meaning is its base text: fills may repeat one
    meanings = list({m[0]: m for m in meanings}.values())
    rng.shuffle(meanings)
    weights = [1 / (rank + 1) ** 1.1 for rank in range(len(meanings))]
    idx = new_index(10_000, DEFAULTS.threshold)
    seen: dict[str, str] = {}  # exact text -> meaning
    meaning_of: dict[str, str] = {}  # index digest -> meaning
    exact = similar = wrong = 0
    for n in range(requests):
        mid, wordings, _ = rng.choices(meanings, weights)[0]
        text = wordings[0] if rng.random() < 0.5 else rng.choice(wordings[1:])
        if text in seen:
            exact += 1
            continue
        match = idx.match(canonical(text))
        if match is not None:
            similar += 1
            wrong += meaning_of[match.digest] != mid
            continue
        seen[text] = mid
        idx.add(f"d{n}", canonical(text))
        meaning_of[f"d{n}"] = mid
    return [
        domain,
        requests,
        len(meanings),
        f"{exact / requests:.1%}",
        f"{(exact + similar) / requests:.1%}",
        f"+{similar / requests:.1%}",
        f"{wrong} ({wrong / max(similar, 1):.2%} of similar hits)",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 entries and shorter replays")
    parser.add_argument("--entries", type=int, default=None, help="index size for the lookup timing")
    args = parser.parse_args()
    entries = args.entries or (10_000 if args.quick else 100_000)
    rows = [json.loads(line) for line in PAIRS.read_text(encoding="utf-8").splitlines()]
    pairs_table, curve = part_pairs(rows)
    print(pairs_table)
    scale_table, scale = part_scale(entries, 2_000 if args.quick else 4_000)
    print(scale_table)
    replays = [part_replay(d, 2_000 if args.quick else 10_000, 6) for d in ("script", "chat")]
    print(
        table(
            "Replayed workloads: hit rate of the exact cache alone, and with similar questions (defaults)",
            ["workload", "requests", "meanings", "exact", "exact + similar", "similar adds", "wrong answers"],
            replays,
            [
                "each request: a meaning by Zipf (s = 1.1), worded as the base half the time, else one of "
                "4 paraphrases; hard negatives are meanings of their own"
            ],
        )
    )
    hits, false, _ = curve[("lexical + guards", DEFAULTS.threshold)]
    summary = [
        ["false hits on hard negatives", f"<= {TARGETS['false']:.1%}", f"{false:.2%}", false <= TARGETS["false"]],
        ["hits on should-share pairs", f">= {TARGETS['hits']:.0%}", f"{hits:.1%}", hits >= TARGETS["hits"]],
        [
            f"lookup p50 at {entries:,}",
            f"<= {TARGETS['p50_ms']} ms",
            f"{scale['p50']:.3f} ms",
            scale["p50"] <= TARGETS["p50_ms"],
        ],
        [
            f"lookup p99 at {entries:,}",
            f"<= {TARGETS['p99_ms']} ms",
            f"{scale['p99']:.3f} ms",
            scale["p99"] <= TARGETS["p99_ms"],
        ],
        [
            f"lookup CPU p50 / p99 at {entries:,}",
            f"<= {TARGETS['p50_ms']} / {TARGETS['p99_ms']} ms",
            f"{scale['cpu_p50']:.3f} / {scale['cpu_p99']:.3f} ms",
            scale["cpu_p50"] <= TARGETS["p50_ms"] and scale["cpu_p99"] <= TARGETS["p99_ms"],
        ],
        ["index memory per 100,000 entries", "stated", f"{scale['memory'] / 2**20:.1f} MiB", True],
    ]
    print(
        table(
            f"Summary (defaults: threshold {DEFAULTS.threshold}, LSH {DEFAULTS.lsh_threshold}, "
            f"{DEFAULTS.num_perm} permutations)",
            ["target", "goal", "measured", "result"],
            [[a, b, c, "PASS" if ok else "MISS"] for a, b, c, ok in summary],
        )
    )


if __name__ == "__main__":
    main()
