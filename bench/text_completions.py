"""What our server adds to a text completion: `POST /v1/completions` through ours against the same
request to llama.cpp's own `/v1/completions` on the same engine (its own port, with its key), one
request at a time, the two taken in turn, each streamed, seeded (so both write the same text);
time to the first token of text and to the end.

    .venv/bin/python bench/text_completions.py                 # 100 requests each
    .venv/bin/python bench/text_completions.py --requests 30
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root first

import httpx  # noqa: E402

from bench.common import Progress, Stats, table  # noqa: E402
from tests.conftest import live_server  # noqa: E402
from tests.engine.test_llamacpp import LLAMACPP  # noqa: E402

PROMPT = "A queue in front of a shared GPU is"


def timed(client: httpx.Client, url: str, seed: int, headers: dict[str, str]) -> tuple[float, float, str]:
    """(first token s, whole answer s, its text) of one streamed completion."""
    body = {"prompt": PROMPT, "max_tokens": 16, "seed": seed, "stream": True}
    started, first, text = time.perf_counter(), None, []
    with client.stream("POST", url, json=body, headers=headers) as response:
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            piece = (json.loads(line[6:]).get("choices") or [{}])[0].get("text") or ""
            if piece and first is None:
                first = time.perf_counter() - started
            text.append(piece)
    if first is None:
        raise RuntimeError(f"{url}: no text in the answer")
    return first, time.perf_counter() - started, "".join(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()
    firsts: dict[str, list[float]] = {"ours": [], "llama.cpp": []}
    wholes: dict[str, list[float]] = {"ours": [], "llama.cpp": []}
    differ = 0
    with live_server(base=LLAMACPP, startup_timeout=600) as live, httpx.Client(timeout=120) as client:
        engine = live.services.engine
        routes = {
            "ours": (live.url + "/v1/completions", {"Cache-Control": "no-store"}),
            "llama.cpp": (engine._server.listening_address + "/v1/completions", dict(engine._http.headers)),
        }
        for url, sent in routes.values():  # warm both
            timed(client, url, 0, sent)
        progress = Progress("completions", args.requests)
        for i in range(args.requests):
            texts = []
            for name in list(routes)[i % 2 :] + list(routes)[: i % 2]:  # each first in turn
                url, sent = routes[name]
                first, whole, text = timed(client, url, i, sent)
                firsts[name].append(first)
                wholes[name].append(whole)
                texts.append(text)
            differ += texts[0] != texts[1]
            progress.update(i + 1)
    rows = []
    for name in routes:
        f, w = Stats.of(firsts[name]), Stats.of(wholes[name])
        rows.append(
            [name, f.n, f"{f.p50 * 1000:.1f}", f"{f.p99 * 1000:.1f}", f"{w.p50 * 1000:.1f}", f"{w.p99 * 1000:.1f}"]
        )
    added = (Stats.of(firsts["ours"]).p50 - Stats.of(firsts["llama.cpp"]).p50) * 1000
    notes = [f"added by ours to TTFT p50: {added:+.2f} ms; answers that differed: {differ} of {args.requests}"]
    columns = ["server", "requests", "TTFT p50", "TTFT p99", "whole p50", "whole p99"]
    print(table("Text completions on llama.cpp, 16 tokens, one request at a time (ms)", columns, rows, notes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
