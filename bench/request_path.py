"""How far one chat request travels through the code: the product files it passes, its stays (a
run of calls in one file) and its returns to a file it had already left, from `api/` to the engine
and back. A request that bounces between layers is hard to follow and to change; #39 asked for
this figure before and after the redesign.

Run: .venv/bin/python bench/request_path.py [--stream] [--tokens N]

Method: a real uvicorn server on loopback around the simulator, in this process; one warm-up
request, then one measured request; `sys.setprofile` records each Python call and return inside
the product's packages (not the libraries, tests or benchmarks), in order. Consecutive events in one
file form a stay; a stay in a file seen before is a return.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import FrameType

import httpx
import uvicorn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app import app_for  # noqa: E402
from settings import load_config  # noqa: E402
from wiring import build_services  # noqa: E402

_OUTSIDE = ("tests", "bench", "scripts", ".venv")


def _product_file(frame: FrameType | None) -> str | None:
    if frame is None:
        return None
    path = Path(frame.f_code.co_filename)
    if not path.is_relative_to(ROOT):
        return None
    rel = path.relative_to(ROOT)
    return None if rel.parts[0] in _OUTSIDE else str(rel)


class PathRecorder:
    def __init__(self) -> None:
        self.files: list[str] = []

    def __call__(self, frame: FrameType, event: str, _arg: object) -> None:
        if event == "call":
            where = _product_file(frame)
        elif event == "return":
            where = _product_file(frame.f_back)
        else:
            return
        if where is not None and (not self.files or self.files[-1] != where):
            self.files.append(where)

    def summary(self) -> tuple[int, int, int, Counter[str]]:
        seen: set[str] = set()
        returns = 0
        for where in self.files:
            returns += where in seen
            seen.add(where)
        return len(seen), len(self.files), returns, Counter(self.files)


async def measure(stream: bool, tokens: int) -> PathRecorder:
    stores = tempfile.mkdtemp(prefix="request-path-")
    overrides = [
        "engine.backend=sim",
        "engine.sim.token_latency_ms=0",
        "engine.sim.prefill_ms_per_token=0",
        "logging.file=",
        "cache.enabled=false",
        "monitor.gpu=false",
        "server.ui=false",
        "usage.path=",
        f"responses.path={stores}/responses.sqlite3",
        f"batches.path={stores}/batches.sqlite3",
    ]
    services = build_services(load_config(None, overrides=overrides))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app_for(services), host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    body = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": tokens, "stream": stream}
    recorder = PathRecorder()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        (await client.post("/v1/chat/completions", json=body)).raise_for_status()  # warm-up
        sys.setprofile(recorder)
        try:
            (await client.post("/v1/chat/completions", json=body)).raise_for_status()
        finally:
            sys.setprofile(None)
    server.should_exit = True
    await serving
    return recorder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stream", action="store_true", help="an SSE stream instead of one JSON body")
    parser.add_argument("--tokens", type=int, default=4, help="max_tokens of the request (default 4)")
    args = parser.parse_args()
    recorder = asyncio.run(measure(args.stream, args.tokens))
    files, stays, returns, per_file = recorder.summary()
    kind = "stream" if args.stream else "JSON"
    print(f"one chat request ({kind}, {args.tokens} tokens): {files} files, {stays} stays, {returns} returns")
    for where, count in per_file.most_common():
        print(f"  {count:4d}  {where}")


if __name__ == "__main__":
    main()
