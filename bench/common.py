"""Machinery shared by the benchmarks in bench/: output, statistics, /proc readings, server processes,
and closed-loop and streaming HTTP clients. Written once here so that every benchmark measures and
reports the same way.

Each benchmark starts with one line before importing this module:

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root first

Run as `python bench/x.py`, Python puts bench/ first on sys.path, where bench/scheduler.py,
bench/engine.py and bench/cache.py would shadow the packages of the same names; importing this
module then drops bench/ from sys.path altogether.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

if TYPE_CHECKING:
    import httpx

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH_DIR]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODEL_DIR = "models/smollm2-135m-instruct"
MODEL_NAME = "smollm2-135m-instruct"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # the bundled model needs no hub
NO_STORE = {"Cache-Control": "no-store"}  # our response cache would otherwise answer repeats
# Our server with a zero-latency simulator: what is measured is serving cost, not generation.
SIM_SERVER_SETTINGS = [
    "engine.backend=sim",  # explicit: the configured default may be a real engine
    "engine.sim.token_latency_ms=0",
    "engine.sim.prefill_ms_per_token=0",
    "logging.file=",
    "logging.level=WARNING",
    "scheduler.max_concurrency=64",
    "scheduler.max_queue_size=100000",
]


# Chat prompts of about 50 words each; with SmolLM2's chat template (its default system prompt) ~90-100 tokens, under
# one 128-token KV block on the CPU, so the prefix cache never skips a prompt's prefill.
PROMPTS = [
    "You are helping a small team plan a weekend hiking trip in the mountains. Describe, step by step, how "
    "they should prepare: what to pack, how to check the weather, how to choose a safe trail, what to eat, "
    "and how to stay in touch if someone gets lost. Be detailed and practical.",
    "Explain to a new employee how the office coffee machine, the shared printer and the meeting room "
    "booking system work. Cover the common mistakes people make, what to do when something breaks, and who "
    "to ask for help. Write it as a friendly, detailed guide with several numbered steps.",
    "Write a long story about a lighthouse keeper on a remote island who finds a message in a bottle. "
    "Describe the island, the keeper's daily routine, the storm that brings the bottle, what the message "
    "says, and what the keeper decides to do next. Use vivid details and some dialogue.",
    "A student wants to learn to cook simple, healthy meals on a small budget. Give a detailed weekly plan "
    "with breakfast, lunch and dinner ideas, a shopping list, tips for storing leftovers, and advice on "
    "which kitchen tools are worth buying first. Explain your reasons for each choice.",
    "Describe how a city could reduce traffic in its centre over the next five years. Discuss public "
    "transport, cycling lanes, parking prices, delivery vans and working from home. For each idea, explain "
    "the benefits, the costs, who might object, and how the city could win them over.",
    "Teach a beginner how to care for houseplants. Explain light, watering, soil, pots, fertiliser and "
    "pests, and describe five easy plants for a dark flat with their needs. Finish with a checklist the "
    "beginner can follow every week to keep the plants healthy through the whole year.",
    "Imagine you are a tour guide in an old European town. Give a detailed walking tour: where it starts, "
    "the buildings and squares on the way, a short history of each, a good place for lunch, and advice for "
    "visitors about tickets, opening hours, comfortable shoes and the best time of day.",
    "Explain how to prepare for a job interview at a software company. Cover researching the company, "
    "practising coding questions, talking about past projects, questions to ask the interviewers, what to "
    "wear, and how to follow up afterwards. Give concrete examples for every step of the way.",
]


# ----------------------------------------------------------------------------- output


class Progress:
    """A tqdm bar on stderr, updated with absolute values (seconds or requests done so far).
    Off a terminal it redraws rarely, so a log file gets a handful of lines per phase."""

    def __init__(self, label: str, total: float, unit: str = "") -> None:
        from tqdm import tqdm

        self.label, self.total, self.unit = label, total, unit
        is_float = isinstance(total, float)
        counts = "{n:.1f}/{total:.1f}" if is_float else "{n_fmt}/{total_fmt} "
        self._interval = 0.2 if sys.stderr.isatty() else 15.0
        self._drawn = 0.0
        self._bar = tqdm(total=total or None, desc=f"  [{label}]", unit=unit or "it", file=sys.stderr, leave=True,
                         mininterval=self._interval, dynamic_ncols=True,
                         bar_format="{desc} {percentage:3.0f}%|{bar:20}| " + counts + unit
                         + " [{elapsed}<{remaining}]{postfix}")
        self._start = time.monotonic()

    def update(self, done: float, extra: str = "") -> None:
        self._bar.n = min(done, self.total) if self.total else done
        if extra:
            self._bar.set_postfix_str(extra, refresh=False)
        now = time.monotonic()
        if now - self._drawn >= self._interval:
            self._drawn = now
            self._bar.refresh()

    def done(self, extra: str = "", final: float | None = None) -> None:
        """Complete the bar; `final` ends it there instead (a wait that ended before its limit)."""
        if final is not None:
            self._bar.total = self.total = final
        self._bar.n = self.total
        self._bar.set_postfix_str(extra or f"({time.monotonic() - self._start:.1f}s)", refresh=False)
        self._bar.close()  # draws the final state once


def note(message: str) -> None:
    """Narration goes to stderr with the progress bars (tqdm.write keeps it off an open bar's line);
    stdout keeps only the results."""
    try:
        from tqdm import tqdm
    except ImportError:
        print(message, file=sys.stderr, flush=True)
        return
    tqdm.write(message, file=sys.stderr)


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]], notes: Sequence[str] = ()) -> str:
    """A plain-text table: first column left-aligned (a label), the rest right-aligned (numbers)."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def fmt(row: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

    rule = "-" * len(fmt(cells[0]))
    return "\n".join([title, rule, fmt(cells[0]), rule, *(fmt(r) for r in cells[1:]), rule, *notes])


def git_head() -> str:
    """The commit measured, marked when the work tree has changes: numbers belong to code."""
    try:
        head, dirty = (subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=5).stdout.strip()
                       for cmd in (["rev-parse", "--short", "HEAD"], ["status", "--porcelain", "--untracked-files=no"]))
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + ("+changes" if dirty else "")


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    """`kill` stops a benchmark like Ctrl-C does, so its finally blocks stop the servers."""
    signal.signal(signal.SIGTERM, _raise_interrupt)


# ----------------------------------------------------------------------------- statistics


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks, q in [0, 100]; nan for no values."""
    if not sorted_values:
        return float("nan")
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = (len(sorted_values) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass
class Stats:
    n: int
    p50: float
    p99: float
    mean: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Stats:
        s = sorted(values)
        if not s:
            return cls(0, float("nan"), float("nan"), float("nan"), float("nan"))
        return cls(len(s), percentile(s, 50), percentile(s, 99), sum(s) / len(s), s[-1])


# ----------------------------------------------------------------------------- /proc (Linux)


def process_cpu_s(pid: int) -> float | None:
    """utime + stime of another process from /proc; None when it is gone (or not on Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def _proc_children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    """Every process below pid: vLLM's servers run their engine in child processes."""
    children, out, todo = _proc_children(), [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of pid and all its descendants (shared pages counted in each: an upper bound)."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for p in [pid, *descendants(pid)]:
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * page
    return total


_STALL_PROBE = """
import sys, time
while True:
    t = time.perf_counter(); time.sleep(0.01); lag = time.perf_counter() - t - 0.01
    if lag > 0.1: print(round(lag, 3), flush=True)
"""


@contextlib.contextmanager
def machine_stalls() -> Iterator[list[float]]:
    """Stalls of over 100 ms that a separate, idle process saw while the block ran: times when the
    CPUs were held by others (engine processes, a neighbour, the hypervisor), which hold up every
    other process too, our front end and the client included."""
    stalls: list[float] = []
    probe = subprocess.Popen([sys.executable, "-c", _STALL_PROBE], stdout=subprocess.PIPE, text=True)
    try:
        yield stalls
    finally:
        probe.terminate()
        out, _ = probe.communicate(timeout=5)
        stalls.extend(float(line) for line in out.split())


def system_busy_s() -> float:
    """CPU seconds spent busy by all CPUs since boot (/proc/stat: everything but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return float("inf")


# ----------------------------------------------------------------------------- server processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def venv_python() -> str:
    """The project's venv interpreter (it has vLLM), else this one."""
    py = ROOT / ".venv" / "bin" / "python"
    return str(py) if py.exists() else sys.executable


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

    def __init__(self, name: str, argv: list[str], port: int, health: str = "/healthz",
                 env: dict[str, str] | None = None, start_timeout_s: float = 240.0,
                 log_prefix: str = "bench") -> None:
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
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def check_ready(self) -> bool:
        """One health probe; raises when the server died or is past its start time-out."""
        import httpx

        assert self.proc is not None
        if self.proc.poll() is not None:
            self.failed = True
            raise RuntimeError(f"{self.name} server exited with {self.proc.returncode} while starting; "
                               f"log: {self.log.name}")
        try:
            ok = httpx.get(self.url + self.health, timeout=1).status_code == 200
        except httpx.HTTPError:
            ok = False
        if ok:
            self.ready_after_s = time.monotonic() - self._started
        elif time.monotonic() - self._started > self.start_timeout_s:
            self.failed = True
            raise RuntimeError(f"{self.name} server not healthy after {self.start_timeout_s:g} s; "
                               f"log: {self.log.name}")
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
def running_server(name: str, argv: list[str], port: int, health: str = "/healthz",
                   start_timeout_s: float = 30.0) -> Iterator[ServerProcess]:
    """Start, wait until healthy, yield, and always stop."""
    server = ServerProcess(name, argv, port, health, start_timeout_s=start_timeout_s)
    try:
        server.start()
        server.wait_ready()
        yield server
    finally:
        server.stop()


def app_argv(port: int, settings: Sequence[str], python: str | None = None) -> list[str]:
    """`python app.py --port P --set K=V ...`: our server as a user starts it."""
    argv = [python or sys.executable, "app.py", "--port", str(port)]
    for s in settings:
        argv += ["--set", s]
    return argv


# ----------------------------------------------------------------------------- closed-loop load


@dataclass
class LoadResult:
    """Non-streaming requests of one closed-loop cell: latencies, X-Cache counts, CPU time."""
    latencies_s: list[float] = field(default_factory=list)
    cache_status: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    wall_s: float = 0.0
    client_cpu_s: float = 0.0
    server_cpu_s: float | None = 0.0
    error_sample: str = ""

    def merge(self, other: LoadResult) -> None:
        self.latencies_s.extend(other.latencies_s)
        for k, v in other.cache_status.items():
            self.cache_status[k] = self.cache_status.get(k, 0) + v
        self.errors += other.errors
        self.wall_s += other.wall_s
        self.client_cpu_s += other.client_cpu_s
        if self.server_cpu_s is None or other.server_cpu_s is None:
            self.server_cpu_s = None
        else:
            self.server_cpu_s += other.server_cpu_s
        self.error_sample = self.error_sample or other.error_sample


def one_connection_client(url: str, timeout_s: float = 30) -> httpx.AsyncClient:
    """One client per worker, one keep-alive connection each: a single AsyncClient's shared pool
    collapses past ~8 concurrent requests (about 350 req/s at 32 here, against a server that does
    several thousand), which would measure httpx rather than the server."""
    import httpx

    return httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=httpx.Limits(max_connections=1))


async def repeat_load(url: str, pid: int, body: dict[str, Any], headers: dict[str, str], concurrency: int,
                      warmup_s: float, duration_s: float, label: str) -> LoadResult:
    """The same non-streaming request from `concurrency` workers, back to back, for duration_s after
    warmup_s (connections opened and code paths warm, nothing recorded); X-Cache values counted."""
    import httpx

    result = LoadResult()
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(one_connection_client(url)) for _ in range(concurrency)]
        recording = False
        stop_at = 0.0

        async def worker(client: httpx.AsyncClient) -> None:
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                try:
                    response = await client.post("/v1/chat/completions", json=body, headers=headers)
                    ok = response.status_code == 200
                    if not ok and not result.error_sample:
                        result.error_sample = f"{response.status_code} {response.text[:200]}"
                    status = response.headers.get("x-cache", "none")
                except httpx.HTTPError as exc:
                    ok, status = False, "error"
                    result.error_sample = result.error_sample or repr(exc)
                dt = time.perf_counter() - t0
                if recording and ok:
                    result.latencies_s.append(dt)
                    result.cache_status[status] = result.cache_status.get(status, 0) + 1
                elif recording:
                    result.errors += 1

        stop_at = time.perf_counter() + warmup_s
        await asyncio.gather(*(worker(c) for c in clients))
        recording = True
        server_cpu0, client_cpu0 = process_cpu_s(pid), own_cpu_s()
        start = time.perf_counter()
        stop_at = start + duration_s
        progress = Progress(label, float(duration_s), "s")
        rep = asyncio.create_task(_report_every(0.5, lambda: progress.update(
            round(time.perf_counter() - start, 1), f"{len(result.latencies_s):,} req")))
        await asyncio.gather(*(worker(c) for c in clients))
        result.wall_s = time.perf_counter() - start
        server_cpu1 = process_cpu_s(pid)
        result.client_cpu_s = own_cpu_s() - client_cpu0
        result.server_cpu_s = None if server_cpu0 is None or server_cpu1 is None else server_cpu1 - server_cpu0
        rep.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await rep
        progress.done(f"{len(result.latencies_s):,} req")
    return result


async def _report_every(interval_s: float, report: Any) -> None:
    while True:
        await asyncio.sleep(interval_s)
        report()


def load_row(name: str, concurrency: int, r: LoadResult) -> tuple[list[object], Stats, float | None]:
    """A table row for one closed-loop cell (latencies in ms), its Stats and server CPU us/request."""
    st = Stats.of([x * 1000 for x in r.latencies_s])
    rps = len(r.latencies_s) / r.wall_s if r.wall_s else 0.0
    cpu_us = r.server_cpu_s / st.n * 1e6 if r.server_cpu_s is not None and st.n else None
    row: list[object] = [name, concurrency, f"{st.n:,}", r.errors, f"{rps:,.0f}", f"{st.p50:.2f}", f"{st.p99:.2f}",
                         f"{st.mean:.2f}", f"{st.max:.2f}", f"{cpu_us:,.0f}" if cpu_us is not None else "-",
                         f"{r.client_cpu_s / r.wall_s:.0%}" if r.wall_s else "-"]
    return row, st, cpu_us


# ----------------------------------------------------------------------------- one streamed chat completion


@dataclass
class StreamResult:
    """What the client saw of one streamed chat completion (times are time.perf_counter values)."""
    sent: float = 0.0
    status: int = 0  # HTTP status; 0 when no response came
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names
    first_content: float | None = None  # first chunk with a non-empty delta.content
    last_content: float | None = None
    ended: float | None = None
    completion_tokens: int | None = None  # from the usage chunk
    dispatched_wait_ms: float | None = None  # ours, when the stream opened while still queued
    error: str = ""
    error_kind: str = ""  # http (status != 200), stream (error chunk in a 200 stream), transport, timeout, incomplete

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def tokens(self) -> int:
        return self.completion_tokens or 0

    @property
    def ttft_s(self) -> float:
        return self.first_content - self.sent if self.first_content is not None else float("nan")

    @property
    def decode_s(self) -> float:
        """First to last content chunk."""
        if self.first_content is None or self.last_content is None:
            return float("nan")
        return self.last_content - self.first_content

    @property
    def tpot_s(self) -> float:
        """Time per output token after the first; nan under two tokens."""
        return self.decode_s / (self.tokens - 1) if self.tokens >= 2 else float("nan")

    @property
    def e2e_s(self) -> float:
        return self.ended - self.sent if self.ended is not None else float("nan")


def _fail(result: StreamResult, kind: str, message: str) -> StreamResult:
    result.error_kind, result.error = kind, message[:200]
    result.ended = time.perf_counter()
    return result


async def stream_chat(client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str] | None = None,
                      timeout_s: float | None = None) -> StreamResult:
    """POST one streaming chat completion and time it. `data:` lines carry JSON chunks; lines
    starting with `:` are comments (ours sends queue notices and `dispatched queue_wait_ms=N`
    as comments while a request waits); `{"error": ...}` inside a 200 stream is a stream error."""
    import httpx

    result = StreamResult(sent=time.perf_counter())
    try:
        async with contextlib.AsyncExitStack() as stack:
            if timeout_s is not None:
                await stack.enter_async_context(asyncio.timeout(timeout_s))
            await _read_stream(client, body, headers or {}, result)
    except TimeoutError:
        return _fail(result, "timeout", f"no complete answer within {timeout_s:g} s")
    except (httpx.HTTPError, ValueError) as exc:
        return _fail(result, "transport", repr(exc))
    if not result.error and (result.completion_tokens is None or result.first_content is None):
        _fail(result, "incomplete", "no usage chunk" if result.completion_tokens is None else "no content")
    result.ended = result.ended or time.perf_counter()
    return result


async def _read_stream(client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str],
                       result: StreamResult) -> None:
    perf = time.perf_counter
    async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
        result.status = response.status_code
        result.headers = {k.lower(): v for k, v in response.headers.items()}
        if response.status_code != 200:
            _fail(result, "http", f"{response.status_code} {(await response.aread())[:200]!r}")
            return
        async for line in response.aiter_lines():
            if line.startswith(":"):
                _read_comment(line, result)
                continue
            if not line.startswith("data:"):
                continue  # blank separators
            data = line[5:].strip()
            if data == "[DONE]":
                break
            obj = json.loads(data)
            if "error" in obj:
                _fail(result, "stream", f"stream error {json.dumps(obj['error'])}")
                return
            if obj.get("usage"):
                result.completion_tokens = obj["usage"].get("completion_tokens")
            for choice in obj.get("choices") or ():
                if (choice.get("delta") or {}).get("content"):
                    result.last_content = perf()
                    if result.first_content is None:
                        result.first_content = result.last_content
    result.ended = perf()


def _read_comment(line: str, result: StreamResult) -> None:
    key = "dispatched queue_wait_ms="
    if key in line:
        with contextlib.suppress(ValueError):
            result.dispatched_wait_ms = float(line.split(key, 1)[1].split()[0])
