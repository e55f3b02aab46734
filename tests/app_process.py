"""`app.py` as its own process, for the tests that kill it with SIGKILL and start it again."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_app(args: list[str], url: str, timeout_s: float = 60) -> subprocess.Popen:
    """The started process, once `/healthz` answers 200; it learns its engine afresh (no pace file
    shared with other runs)."""
    args = [*args, "--set", "scheduler.limit.pace_path="]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the server did not start")
