"""What our server adds to a text completion: `POST /v1/completions` through ours against the same
request to llama.cpp's own `/v1/completions` on the same engine (its own port, with its key), and
the same for a chat (`/v1/chat/completions`) beside it; one request at a time, the four taken in
turn, each streamed and seeded (so ours and llama.cpp's write the same text); time to the first
token of text and to the end.

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
from tests.engine.test_llamacpp import LLAMACPP, MODEL  # noqa: E402

PROMPT = "A queue in front of a shared GPU is"
BODIES = {"text": {"prompt": PROMPT}, "chat": {"messages": [{"role": "user", "content": PROMPT}]}}
PATHS = {"text": "/v1/completions", "chat": "/v1/chat/completions"}


def timed(client: httpx.Client, url: str, kind: str, seed: int, headers: dict[str, str]) -> tuple[float, float, str]:
    """(first token s, whole answer s, its text) of one streamed answer."""
    body = {"model": MODEL, **BODIES[kind], "max_tokens": 16, "seed": seed, "stream": True}
    started, first, text = time.perf_counter(), None, []
    with client.stream("POST", url, json=body, headers=headers) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            choice = (json.loads(line[6:]).get("choices") or [{}])[0]
            piece = choice.get("text") or (choice.get("delta") or {}).get("content") or ""
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
    names = [f"{server} {kind}" for kind in PATHS for server in ("ours", "llama.cpp")]
    firsts: dict[str, list[float]] = {n: [] for n in names}
    wholes: dict[str, list[float]] = {n: [] for n in names}
    differ = {kind: 0 for kind in PATHS}
    # a connection per request, to both: llama.cpp's server closes a kept-alive one after a few requests
    fresh = httpx.Limits(max_keepalive_connections=0)
    with live_server(base=LLAMACPP, startup_timeout=600) as live, httpx.Client(timeout=120, limits=fresh) as client:
        engine = live.services.engine
        roots = {
            "ours": (live.url, {"Cache-Control": "no-store"}),
            "llama.cpp": (engine._server.listening_address, dict(engine._http.headers)),
        }

        def ask(name: str, seed: int) -> tuple[float, float, str]:
            server, kind = name.split(" ")
            root, headers = roots[server]
            return timed(client, root + PATHS[kind], kind, seed, headers)

        for name in names:  # warm each
            ask(name, 0)
        progress = Progress("answers", args.requests)
        for i in range(args.requests):
            texts = {}
            for name in names[i % 4 :] + names[: i % 4]:  # each first in turn
                first, whole, texts[name] = ask(name, i)
                firsts[name].append(first)
                wholes[name].append(whole)
            for kind in PATHS:
                differ[kind] += texts[f"ours {kind}"] != texts[f"llama.cpp {kind}"]
            progress.update(i + 1)
    rows = []
    for name in names:
        f, w = Stats.of(firsts[name]), Stats.of(wholes[name])
        rows.append(
            [name, f.n, f"{f.p50 * 1000:.1f}", f"{f.p99 * 1000:.1f}", f"{w.p50 * 1000:.1f}", f"{w.p99 * 1000:.1f}"]
        )
    notes = [
        f"added by ours to TTFT p50, {kind}: {(Stats.of(firsts[f'ours {kind}']).p50 - Stats.of(firsts[f'llama.cpp {kind}']).p50) * 1000:+.2f} ms;"
        f" answers that differed: {differ[kind]} of {args.requests}"
        for kind in PATHS
    ]
    columns = ["server, route", "requests", "TTFT p50", "TTFT p99", "whole p50", "whole p99"]
    print(table("Text completions and chats on llama.cpp, 16 tokens, one request at a time (ms)", columns, rows, notes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
