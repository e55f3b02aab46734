"""Figures for the monitor panel: GPU memory (or process memory and KV cache without a GPU), queue,
throughput and cache, the table that shows them, plus a short history for the plots. No Gradio here."""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from cache.redis_store import RedisResponseCache
from cache.store import ResponseCache
from monitor.gpu import GpuMonitor
from scheduler.snapshot import Snapshot
from ui.i18n import message


@dataclass(slots=True, frozen=True)
class Sample:
    t: float
    waiting: int
    running: int
    memory_gb: float
    tokens_per_s: float


class MonitorHistory:
    """The last `window_s` of samples, at most one per `min_interval_s` however many tabs refresh."""

    def __init__(self, window_s: float = 600.0, min_interval_s: float = 1.0) -> None:
        self.window_s, self.min_interval_s = window_s, min_interval_s
        self.samples: deque[Sample] = deque()
        self._last_tokens: tuple[float, int] | None = None

    def sample(self, snap: Snapshot, gpu: GpuMonitor | None, now: float | None = None) -> Sample | None:
        now = time.monotonic() if now is None else now
        if self.samples and now - self.samples[-1].t < self.min_interval_s:
            return None
        tokens = snap.engine.generated_tokens if snap.engine is not None else 0
        rate = 0.0
        if self._last_tokens is not None and now > self._last_tokens[0]:
            rate = max(0, tokens - self._last_tokens[1]) / (now - self._last_tokens[0])
        self._last_tokens = (now, tokens)
        sample = Sample(now, snap.waiting_total, snap.running, memory_in_use_bytes(gpu) / 2**30, rate)
        self.samples.append(sample)
        while self.samples and now - self.samples[0].t > self.window_s:
            self.samples.popleft()
        return sample

    def rows(self, field_name: str) -> list[dict]:
        """Rows for a line plot: minutes before the latest sample, and the value. Before any
        sample, one zero point, so the plot shows its axes instead of nothing."""
        if not self.samples:
            return [{"minutes": 0.0, "value": 0.0}]
        last = self.samples[-1].t
        return [
            {"minutes": round((s.t - last) / 60, 3), "value": round(getattr(s, field_name), 3)} for s in self.samples
        ]


def figures(
    snap: Snapshot, gpu: GpuMonitor | None, cache: ResponseCache | RedisResponseCache | None, history: MonitorHistory
) -> dict:
    """What the monitor panel shows, from the scheduler's snapshot plus memory and cache."""
    cache_stats = cache.stats() if cache is not None else None
    devices = gpu.devices if gpu is not None else []
    return {
        "gpus": [
            {
                "index": d.index,
                "name": d.name,
                "used_gb": d.used_bytes / 2**30,
                "total_gb": d.total_bytes / 2**30,
                "utilization_pct": d.utilization_pct,
            }
            for d in devices
        ],
        "process_memory_gb": process_memory_bytes() / 2**30,
        "kv_usage_pct": 100 * snap.engine.kv_usage if snap.engine else None,
        "waiting": {c.value: n for c, n in snap.waiting.items()},
        "running": snap.running,
        "slots": snap.limit,
        "tpot_s": snap.measured_tpot_s,
        "tpot_objective_s": snap.slo_tpot_s,
        "avg_wait_s": snap.avg_wait_s,
        "tokens_per_s": history.samples[-1].tokens_per_s if history.samples else 0.0,
        "cache_hit_rate": cache_stats["hit_rate"] if cache_stats else None,
        "emergency": snap.emergency,
        "admission_paused": snap.admission_paused,
    }


def monitor_markdown(s: dict, code: str) -> str:
    if s["gpus"]:
        memory = "\n".join(
            f"- GPU {g['index']} {g['name']}: {g['used_gb']:.1f} / {g['total_gb']:.1f} GiB, "
            f"{g['utilization_pct']:.0f}% busy"
            for g in s["gpus"]
        )
    else:
        kv = "–" if s["kv_usage_pct"] is None else f"{s['kv_usage_pct']:.1f}%"
        memory = (
            f"{message(code, 'no_gpu')}\n\n- process memory: {s['process_memory_gb']:.2f} GiB\n- KV cache in use: {kv}"
        )
    waiting = s["waiting"]
    hit = "–" if s["cache_hit_rate"] is None else f"{100 * s['cache_hit_rate']:.0f}%"
    tpot = "–" if s["tpot_s"] is None else f"{1000 * s['tpot_s']:.0f} ms"
    return (
        f"{memory}\n\n| waiting high / medium / low | running / limit | time per token (objective) | avg wait | "
        f"tokens/s | cache hit rate | emergency | admissions |\n|---|---|---|---|---|---|---|---|\n"
        f"| {waiting['high']} / {waiting['medium']} / {waiting['low']} | {s['running']} / {s['slots']} | "
        f"{tpot} ({1000 * s['tpot_objective_s']:.0f} ms) | {s['avg_wait_s']:.1f} s | {s['tokens_per_s']:.1f} | "
        f"{hit} | "
        f"{'ON' if s['emergency'] else 'off'} | {'paused' if s['admission_paused'] else 'open'} |"
    )


def memory_in_use_bytes(gpu: GpuMonitor | None) -> int:
    if gpu is not None and gpu.devices:
        return sum(d.used_bytes for d in gpu.devices)
    return process_memory_bytes()


def process_memory_bytes(pid: int | None = None) -> int:
    """Resident memory of this process and its children (vLLM runs its engine in child processes)."""
    pid = os.getpid() if pid is None else pid
    total = _rss(pid)
    for child in _children(pid):
        total += process_memory_bytes(child)
    return total


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            out += [int(c) for c in task.read_text().split()]
        except OSError:
            continue
    return out
