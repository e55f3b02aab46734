"""A vLLM stat logger that keeps the latest scheduler figures in a dict the engine reads.

Imported only by the vLLM backend, after vllm itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase


class SnapshotStatLogger(StatLoggerBase):
    def __init__(self, vllm_config: Any, engine_index: int = 0, snapshot: dict | None = None) -> None:
        self.snapshot = snapshot if snapshot is not None else {}
        self.snapshot.setdefault("prefix_queries", 0)
        self.snapshot.setdefault("prefix_hits", 0)

    def record(
        self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None, engine_idx: int = 0
    ) -> None:
        if scheduler_stats is None:
            return
        snap = self.snapshot
        snap["running"] = scheduler_stats.num_running_reqs
        snap["waiting"] = scheduler_stats.num_waiting_reqs
        snap["kv_usage"] = scheduler_stats.kv_cache_usage
        prefix = scheduler_stats.prefix_cache_stats
        if prefix is not None:
            snap["prefix_queries"] += prefix.queries
            snap["prefix_hits"] += prefix.hits
            if snap["prefix_queries"]:
                snap["prefix_cache_hit_rate"] = snap["prefix_hits"] / snap["prefix_queries"]

    def log_engine_initialized(self) -> None:
        return None


def stats_logger_factory(snapshot: dict) -> Callable[..., SnapshotStatLogger]:
    def make(vllm_config: Any, engine_index: int = 0) -> SnapshotStatLogger:
        return SnapshotStatLogger(vllm_config, engine_index, snapshot)

    return make
