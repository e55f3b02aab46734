"""`python app.py` as a user runs it: flags, config errors, clean Ctrl-C."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "app.py", *args, "--set", "scheduler.limit.pace_path="],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def wait_healthy(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("server did not become healthy")


def test_bad_config_stops_with_one_line():
    result = subprocess.run(
        [sys.executable, "app.py", "--set", "scheduler.max_concurrency=-3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "config error: scheduler.max_concurrency: -3 is not allowed; expected an integer between 0 and 4096"
    ]
    unknown = subprocess.run(
        [sys.executable, "app.py", "--preset", "nope"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert unknown.returncode == 2 and "preset: 'nope' is not defined" in unknown.stderr


def test_flags_and_clean_ctrl_c(tmp_path):
    port = free_port()
    proc = start(
        "--preset",
        "personal",
        "--engine",
        "sim",
        "--port",
        str(port),
        "--set",
        "scheduler.max_concurrency=1",
        "--set",
        "engine.sim.token_latency_ms=50",
        "--set",
        "engine.sim.natural_stop=false",  # else a short answer may end before Ctrl-C
        "--set",
        f"logging.file={tmp_path / 'queue.log'}",
        "--set",
        "logging.level=DEBUG",
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        status = httpx.get(url + "/v1/queue/status").json()
        assert status["slots"] == 1 and status["max_queue_size"] == 32  # flag over preset over file
        results: dict = {}

        def call(name: str) -> None:
            body = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 500}
            results[name] = httpx.post(url + "/v1/chat/completions", json=body, timeout=30)

        threads = [threading.Thread(target=call, args=(n,)) for n in ("running", "waiting")]
        for t in threads:
            t.start()
            time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        for t in threads:
            t.join(30)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130  # the shell's code for Ctrl-C, after a clean shutdown
    assert "Traceback" not in out
    for response in results.values():
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "server_shutting_down"
    log = (tmp_path / "queue.log").read_text()
    assert "enqueue id=" in log and "shutdown id=" in log


@pytest.mark.vllm
def test_an_engine_that_cannot_start_stops_the_process_with_one_line(vllm_installed):
    port = free_port()
    proc = start(
        "--port",
        str(port),
        "--engine",
        "vllm",
        "--set",
        "engine.vllm.extra_args={max_num_seqz: 4}",
        "--set",
        "logging.file=",
    )
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "the engine failed to start: engine.vllm.extra_args.max_num_seqz: not an argument of vLLM's" in out
    assert "Traceback" not in out
