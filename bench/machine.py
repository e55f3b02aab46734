"""The machine under a benchmark, read from /proc (Linux): CPU time and memory of a process tree,
the whole machine's busy time and free memory, and the stalls an idle probe sees."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

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


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user and system) pid and all its living descendants have used."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in [pid, *descendants(pid)]:
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
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
