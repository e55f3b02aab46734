"""llama.cpp's own HTTP server, from the same xllamacpp build our engine runs, as the peer in
bench/engine.py and bench/load.py: the server a CPU user would run instead of us.

    .venv/bin/python bench/llamacpp_server.py --port 8090 --slots 8 --kv-tokens 16384

xllamacpp runs llama.cpp's server code, HTTP included, in process; this script only sets the same
engine parameters our llama.cpp engine uses (one KV cache the slots share, the bundled GGUF as
shipped) on a fixed port and waits for SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root first: see bench/common.py

from engine.model_files import resolve_gguf  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(prog="bench/llamacpp_server.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--slots", type=int, default=16)
    p.add_argument("--kv-tokens", type=int, default=32768)
    p.add_argument("--model", default="bundled:smollm2-135m-instruct")
    args = p.parse_args()
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(resolve_gguf(args.model))
    params.n_parallel, params.n_ctx, params.kv_unified = args.slots, args.kv_tokens, True
    params.port, params.hostnames = args.port, ["127.0.0.1"]
    params.endpoint_metrics = True
    params.verbosity = 0
    server = xllamacpp.Server(params)
    print(f"llama.cpp server on {server.listening_address}", flush=True)
    stopped = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.set())
    stopped.wait()
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
