"""Typed configuration: one dataclass per section, the single source of truth for every knob.

Field metadata carries the allowed range (`min`, `max`) so the loader can name the key and the
allowed values in its one-line error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


def bounded(default, lo=None, hi=None):  # noqa: ANN001, ANN201 - thin field() wrapper
    return field(default=default, metadata={"min": lo, "max": hi})


@dataclass(slots=True)
class PerClass:
    """A value per priority class."""

    high: float = field(metadata={"min": 0.0})
    medium: float = field(metadata={"min": 0.0})
    low: float = field(metadata={"min": 0.0})

    def of(self, name: str) -> float:
        return float(getattr(self, name))


@dataclass(slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = bounded(8000, 0, 65535)
    max_body_bytes: int = bounded(1_048_576, 1024)
    default_max_tokens: int = bounded(1024, 1)
    api_keys: list[str] = field(default_factory=list)
    admin_keys: list[str] = field(default_factory=list)
    ui: bool = True


@dataclass(slots=True)
class SimConfig:
    """The deterministic simulator engine (tests and benchmarks, not a model)."""

    model_name: str = "sim"
    token_latency_ms: float = bounded(20.0, 0.0)
    prefill_ms_per_token: float = bounded(0.05, 0.0)
    batch_slowdown: float = bounded(0.03, 0.0)
    kv_tokens: int = bounded(65_536, 16)
    max_model_len: int = bounded(4096, 16)
    max_num_seqs: int = bounded(256, 1)
    startup_s: float = bounded(0.0, 0.0)
    natural_stop: bool = True


@dataclass(slots=True)
class VllmConfig:
    """vLLM engine arguments. `bundled:NAME` models ship inside a Python package (no download)."""

    model: str = "bundled:smollm2-135m-instruct"
    served_model_name: str = "smollm2-135m-instruct"
    models_dir: str = "models"
    tensor_parallel_size: int = bounded(1, 1, 64)
    max_num_seqs: int = bounded(128, 1, 4096)
    max_model_len: int = bounded(2048, 16)
    gpu_memory_utilization: float = bounded(0.92, 0.05, 1.0)
    block_size: int = bounded(0, 0, 1024)
    enable_prefix_caching: bool = True
    enforce_eager: bool = True
    kv_cache_memory_bytes: int = bounded(0, 0)  # 0: on GPUs gpu_memory_utilization, on the CPU engine/kv_size.py
    scheduling_policy: Literal["priority", "fcfs"] = "priority"
    extra_args: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class EngineConfig:
    backend: Literal["vllm", "sim"] = "vllm"
    vllm: VllmConfig = field(default_factory=VllmConfig)
    sim: SimConfig = field(default_factory=SimConfig)


@dataclass(slots=True)
class PressureConfig:
    """Emergency mode: entered when the queue is under pressure, left when it is gone."""

    interval_s: float = bounded(5.0, 0.05)
    avg_wait_s: float = bounded(3.0, 0.0)
    high_waiting: int = bounded(3, 1)
    high_boost: float = bounded(1.5, 1.0)
    low_max_wait_s: float = bounded(20.0, 0.1)


@dataclass(slots=True)
class SloConfig:
    """Latency objectives: what an admitted request is promised."""

    tpot_s: float = bounded(0.1, 0.001)
    ttft_s: float = bounded(1.0, 0.01)


@dataclass(slots=True)
class LimitConfig:
    """The adaptive running limit: how many sequences the engine may hold while TPOT stays within
    the objective."""

    adaptive: bool = True
    initial: int = bounded(16, 1, 4096)
    headroom: float = bounded(0.1, 0.0, 0.9)
    interval_s: float = bounded(1.0, 0.05)
    high_reserve: float = bounded(0.1, 0.0, 0.9)


@dataclass(slots=True)
class SchedulerConfig:
    max_concurrency: int = bounded(0, 0, 4096)
    max_queue_size: int = bounded(256, 1, 1_000_000)
    max_wait_s: PerClass = field(default_factory=lambda: PerClass(300.0, 120.0, 60.0))
    weights: PerClass = field(default_factory=lambda: PerClass(10.0, 5.0, 1.0))
    aging_per_s: float = bounded(0.25, 0.0)
    short_bonus: float = bounded(2.5, 0.0)
    short_max_tokens: int = bounded(64, 1)
    priority_keys: list[str] = field(default_factory=list)
    pressure: PressureConfig = field(default_factory=PressureConfig)
    slo: SloConfig = field(default_factory=SloConfig)
    limit: LimitConfig = field(default_factory=LimitConfig)


@dataclass(slots=True)
class CacheConfig:
    """The response cache in front of the queue (SQLite through aiosqlite)."""

    enabled: bool = True
    path: str = "data/response-cache.sqlite3"
    ttl_s: float = bounded(86_400.0, 1.0)
    max_entries: int = bounded(10_000, 1)
    max_bytes: int = bounded(104_857_600, 1024)
    mode: Literal["deterministic", "all", "off"] = "deterministic"
    normalize: bool = False
    casefold: bool = False
    namespace_by_key: bool = False
    purge_interval_s: float = bounded(60.0, 0.1)


@dataclass(slots=True)
class MonitorConfig:
    """GPU memory sampling (pynvml) and the guard that pauses admissions near the limit."""

    gpu: bool = True
    interval_s: float = bounded(2.0, 0.05)
    vram_high_pct: float = bounded(90.0, 1.0, 100.0)
    vram_resume_pct: float = bounded(80.0, 0.0, 100.0)


@dataclass(slots=True)
class AlertsConfig:
    """Posts to a webhook when the average queue wait stays high, and when it recovers."""

    webhook_url: str = ""
    format: Literal["generic", "slack", "wecom"] = "generic"
    wait_s: float = bounded(5.0, 0.0)
    for_s: float = bounded(60.0, 0.0)
    cooldown_s: float = bounded(600.0, 0.0)
    check_interval_s: float = bounded(5.0, 0.05)


@dataclass(slots=True)
class LoggingConfig:
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    file: str = "logs/gpt-oss-webui.log"
    max_bytes: int = bounded(10_485_760, 1024)
    backup_count: int = bounded(5, 0)


@dataclass(slots=True)
class Config:
    server: ServerConfig = field(default_factory=ServerConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
