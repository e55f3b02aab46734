"""What Anthropic's Messages API and Ollama's API add to the time to the first token, against the
same request on `/v1/chat/completions`: one server, the routes taken in turn, one request at a
time, each streamed, the first token timed from the request's send to its first token of text or
reasoning (a chat chunk with non-empty `content` or `reasoning_content`; a `text_delta` or
`thinking_delta` with text; an Ollama line whose message has content or thinking: the opening
role chunk, `content_block_start` and a queue notice carry none). On the zero-latency simulator by default, where
everything measured is ours; `--engine llamacpp` or `vllm` for a real one (installed by `make run`).

    .venv/bin/python bench/messages.py                 # simulator, 300 requests a route
    .venv/bin/python bench/messages.py --requests 50 --engine llamacpp
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

PROMPT = [{"role": "user", "content": "Say something about queues, in a few words."}]
ROUTES = ["chat", "messages", "ollama"]


def has_token(route: str, data: dict) -> bool:
    if route == "ollama":
        message = data.get("message") or {}
        return bool(message.get("content") or message.get("thinking"))
    if route == "chat":
        delta = (data.get("choices") or [{}])[0].get("delta") or {}
        return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"))
    delta = data.get("delta") or {} if data.get("type") == "content_block_delta" else {}
    return bool(delta.get("text") or delta.get("thinking"))


def first_token_s(client: httpx.Client, route: str, model: str) -> float:
    path = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "ollama": "/api/chat"}[route]
    body: dict = {"model": model, "messages": PROMPT, "stream": True}
    if route == "ollama":
        body["options"] = {"num_predict": 16, "temperature": 0}
    else:
        body.update(max_tokens=16, temperature=0)
    started = time.perf_counter()
    with client.stream("POST", path, json=body) as response:
        for line in response.iter_lines():
            data = line[6:] if line.startswith("data: {") else line if line.startswith("{") else None
            if data is not None and has_token(route, json.loads(data)):
                return time.perf_counter() - started
    raise RuntimeError(f"{route}: no token in the answer")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--engine", choices=["sim", "llamacpp", "vllm"], default="sim")
    args = parser.parse_args()
    overrides = ["engine.sim.token_latency_ms=0"] if args.engine == "sim" else [f"engine.backend={args.engine}"]
    times: dict[str, list[float]] = {"chat": [], "messages": [], "ollama": []}
    with live_server(*overrides, startup_timeout=600) as live, httpx.Client(base_url=live.url, timeout=120) as client:
        model = live.services.engine.capabilities.model
        for route in times:  # warm both routes
            first_token_s(client, route, model)
        progress = Progress("first tokens", args.requests)
        for i in range(args.requests):
            for route in ROUTES[i % len(ROUTES) :] + ROUTES[: i % len(ROUTES)]:  # each route first in turn
                times[route].append(first_token_s(client, route, model))
            progress.update(i + 1)
    stats = {route: Stats.of(values) for route, values in times.items()}
    rows = [
        [route, s.n, f"{s.p50 * 1000:.2f}", f"{s.p99 * 1000:.2f}", f"{s.mean * 1000:.2f}", f"{s.max * 1000:.2f}"]
        for route, s in stats.items()
    ]
    added = {route: (stats[route].p50 - stats["chat"].p50) * 1000 for route in ("messages", "ollama")}
    print(
        table(
            f"Time to first token, {args.engine}, one request at a time (ms)",
            ["route", "requests", "p50", "p99", "mean", "max"],
            rows,
            [
                f"added by /v1/messages at p50: {added['messages']:+.2f} ms, by /api/chat: {added['ollama']:+.2f} ms (target: under 2 ms)"
            ],
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
