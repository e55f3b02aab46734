"""Typed configuration: one pydantic model per section, the single source of truth for every knob.

Each bound is declared once, here (`Field(ge=, le=)`): the loader names it in its one-line
errors and the page's operator form reads it. Unknown keys are refused.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from annotated_types import Ge, Le
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator


def _as_list(value: Any) -> Any:
    """`--set server.api_keys=a,b` gives a string; YAML may give numbers."""
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list):
        return [str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for v in value]
    return value


StrList = Annotated[list[str], BeforeValidator(_as_list)]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class PerClass(Section):
    """A value per priority class."""

    high: float = Field(ge=0.0)
    medium: float = Field(ge=0.0)
    low: float = Field(ge=0.0)

    def of(self, name: str) -> float:
        return float(getattr(self, name))


class Limits(Section):
    """What one caller may use; None is no limit. Tokens are prompt plus completion."""

    rpm: int | None = Field(None, ge=1)  # requests per minute
    tpm: int | None = Field(None, ge=1)  # tokens per minute
    max_parallel: int | None = Field(None, ge=1)  # running in the engine at once; more wait in the queue
    max_queued: int | None = Field(None, ge=0)  # waiting at once
    daily_tokens: int | None = Field(None, ge=1)  # per UTC day

    def over(self, fallback: Limits) -> Limits:
        """These limits, each unset one taken from `fallback`."""
        return Limits(**{name: getattr(self, name) if getattr(self, name) is not None else getattr(fallback, name)
                         for name in Limits.model_fields})


class KeyConfig(Limits):
    """One named key. `key_sha256` (hex) keeps the key itself out of the config."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
    key: str | None = Field(None, min_length=8)
    key_sha256: str | None = Field(None, pattern=r"^[0-9a-fA-F]{64}$")
    priority_class: Literal["high", "medium", "low"] = Field("medium", alias="class")
    admin: bool = False

    @model_validator(mode="after")
    def _one_key(self) -> KeyConfig:
        if (self.key is None) == (self.key_sha256 is None):
            raise ValueError(f"key {self.name!r} needs exactly one of key and key_sha256")
        if self.name == "anonymous":
            raise ValueError("the name 'anonymous' is kept for callers without a key")
        return self


class ServerConfig(Section):
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    max_body_bytes: int = Field(1_048_576, ge=1024)
    max_header_bytes: int = Field(32_768, ge=1024)  # request line and headers; 431 past it
    header_timeout_s: float = Field(10.0, ge=0.1)  # to receive a request's headers
    body_timeout_s: float = Field(30.0, ge=0.1)  # to receive its body
    keep_alive_s: float = Field(5.0, ge=0.1)  # an idle connection between requests
    default_max_tokens: int = Field(1024, ge=1)
    api_keys: StrList = Field(default_factory=list)
    admin_keys: StrList = Field(default_factory=list)
    keys: list[KeyConfig] = Field(default_factory=list)  # named keys with a class and limits
    key_file: str = ""  # a YAML list of more named keys, kept out of this file
    default_limits: Limits = Field(default_factory=Limits)  # for a key's unset limits
    anonymous_limits: Limits = Field(default_factory=Limits)  # for callers without a key (open server)
    cors_origins: StrList = Field(default_factory=list)  # origins other sites' pages may call from; []: none
    ui: bool = True

    @model_validator(mode="after")
    def _unique_names(self) -> ServerConfig:
        names = [k.name for k in self.keys]
        if len(set(names)) != len(names):
            raise ValueError(f"key names must be unique; repeated: {sorted({n for n in names if names.count(n) > 1})}")
        return self


class SimConfig(Section):
    """The deterministic simulator engine (tests and benchmarks, not a model)."""

    model_name: str = "sim"
    token_latency_ms: float = Field(20.0, ge=0.0)
    prefill_ms_per_token: float = Field(0.05, ge=0.0)
    batch_slowdown: float = Field(0.03, ge=0.0)
    kv_tokens: int = Field(65_536, ge=16)
    max_model_len: int = Field(4096, ge=16)
    max_num_seqs: int = Field(256, ge=1)
    startup_s: float = Field(0.0, ge=0.0)
    natural_stop: bool = True
    harmony: bool = False  # answer as gpt-oss does: an analysis message, then a final one


class VllmConfig(Section):
    """vLLM engine arguments. `bundled:NAME` models ship inside a Python package (no download)."""

    model: str = "bundled:smollm2-135m-instruct"
    served_model_name: str = "smollm2-135m-instruct"
    models_dir: str = "models"
    tensor_parallel_size: int = Field(1, ge=1, le=64)
    pipeline_parallel_size: int = Field(1, ge=1, le=64)  # layers split over GPUs or nodes
    distributed_executor_backend: Literal["", "mp", "ray"] = ""  # "": vLLM's choice; ray: across nodes
    max_num_seqs: int = Field(128, ge=1, le=4096)
    max_model_len: int = Field(2048, ge=16)
    gpu_memory_utilization: float = Field(0.92, ge=0.05, le=1.0)
    block_size: int = Field(0, ge=0, le=1024)
    enable_prefix_caching: bool = True
    enforce_eager: bool = True
    kv_cache_memory_bytes: int = Field(0, ge=0)  # 0: on GPUs gpu_memory_utilization, on the CPU engine/kv_size.py
    scheduling_policy: Literal["priority", "fcfs"] = "priority"
    extra_args: dict[str, Any] = Field(default_factory=dict)


class LlamaCppConfig(Section):
    """llama.cpp in process (xllamacpp): GGUF models on CPUs, Macs and GPUs without vLLM."""

    model: str = "bundled:smollm2-135m-instruct"  # or a local .gguf file; never downloaded
    served_model_name: str = "smollm2-135m-instruct"
    n_parallel: int = Field(16, ge=1, le=512)  # sequences at once: the engine's slots
    kv_tokens: int = Field(32_768, ge=64)  # KV cells all slots share: the token budget
    max_model_len: int = Field(2048, ge=16)  # one sequence's prompt plus answer, at most kv_tokens
    threads: int = Field(0, ge=0)  # 0: llama.cpp's choice
    batch_tokens: int = Field(2048, ge=16)  # prompt tokens per engine step
    gpu_layers: int = Field(-1, ge=-1)  # layers offloaded where the build has a GPU; -1: all
    extra_args: dict[str, Any] = Field(default_factory=dict)  # more of xllamacpp's CommonParams fields

    @model_validator(mode="after")
    def _fits(self) -> LlamaCppConfig:
        if self.max_model_len > self.kv_tokens:
            raise ValueError(f"max_model_len ({self.max_model_len}) cannot exceed kv_tokens ({self.kv_tokens})")
        return self


def _as_upstreams(value: Any) -> Any:
    """`--set engine.openai.upstreams=[http://a:8000/v1,http://b:8000/v1]`: bare URLs become entries."""
    value = _as_list(value) if isinstance(value, str) else value
    if isinstance(value, list):
        return [{"url": v} if isinstance(v, str) else v for v in value]
    return value


class UpstreamEntry(Section):
    url: str = Field(pattern=r"^https?://\S+$")  # an OpenAI base URL, e.g. http://host:8000/v1
    api_key: str = ""
    weight: float = Field(1.0, gt=0.0)


class OpenAIUpstreamConfig(Section):
    """OpenAI-compatible servers (vLLM's first) behind this one; our scheduler keeps the order."""

    upstreams: Annotated[list[UpstreamEntry], BeforeValidator(_as_upstreams)] = Field(default_factory=list)
    model: str = ""  # "": the model the first upstream serves
    max_model_len: int = Field(0, ge=0)  # 0: what the upstream reports (vLLM does), else 4096
    slots_per_upstream: int = Field(128, ge=1)  # sequences each runs at once; capacity is their sum
    tokenize: bool = True  # prompt tokens by an upstream's /tokenize (vLLM's); false, or none: estimated
    send_priority: bool = True  # pass the class as vLLM's `priority` (needs --scheduling-policy priority)
    prefix_affinity: bool = True  # the same first message (system prompt, conversation) goes to the same upstream
    health_interval_s: float = Field(5.0, ge=0.1)
    metrics_interval_s: float = Field(1.0, ge=0.1)
    eject_after: int = Field(2, ge=1)  # consecutive failures that take an upstream out
    connect_timeout_s: float = Field(5.0, ge=0.1)
    retries: int = Field(2, ge=0)  # other upstreams tried for a request that failed before its first token


class EngineConfig(Section):
    backend: Literal["auto", "vllm", "llamacpp", "sim", "openai"] = "auto"
    vllm: VllmConfig = Field(default_factory=VllmConfig)
    llamacpp: LlamaCppConfig = Field(default_factory=LlamaCppConfig)
    sim: SimConfig = Field(default_factory=SimConfig)
    openai: OpenAIUpstreamConfig = Field(default_factory=OpenAIUpstreamConfig)


class PressureConfig(Section):
    """Emergency mode: entered when the queue is under pressure, left when it is gone."""

    interval_s: float = Field(5.0, ge=0.05)
    avg_wait_s: float = Field(3.0, ge=0.0)
    high_waiting: int = Field(3, ge=1)
    high_boost: float = Field(1.5, ge=1.0)
    low_max_wait_s: float = Field(20.0, ge=0.1)


class SloConfig(Section):
    """Latency objectives: what an admitted request is promised."""

    tpot_s: float = Field(0.1, ge=0.001)
    ttft_s: float = Field(1.0, ge=0.01)


class LimitConfig(Section):
    """The adaptive running limit: how many sequences the engine may hold while TPOT stays within
    the objective."""

    adaptive: bool = True
    initial: int = Field(16, ge=1, le=4096)
    headroom: float = Field(0.1, ge=0.0, le=0.9)
    on_time_share: float = Field(0.9, ge=0.0, le=0.99)
    interval_s: float = Field(1.0, ge=0.05)
    high_reserve: float = Field(0.1, ge=0.0, le=0.9)


class FairShareConfig(Section):
    """Inside a class, the least-served caller goes next (service = weighted tokens)."""

    enabled: bool = True
    input_weight: float = Field(1.0, ge=0.0)
    output_weight: float = Field(2.0, ge=0.0)


class SchedulerConfig(Section):
    max_concurrency: int = Field(0, ge=0, le=4096)
    max_queue_size: int = Field(256, ge=1, le=1_000_000)
    max_wait_s: PerClass = Field(default_factory=lambda: PerClass(high=300.0, medium=120.0, low=60.0))
    weights: PerClass = Field(default_factory=lambda: PerClass(high=10.0, medium=5.0, low=1.0))
    aging_per_s: float = Field(0.25, ge=0.0)
    short_bonus: float = Field(2.5, ge=0.0)
    short_max_tokens: int = Field(64, ge=1)
    priority_keys: StrList = Field(default_factory=list)
    pressure: PressureConfig = Field(default_factory=PressureConfig)
    slo: SloConfig = Field(default_factory=SloConfig)
    limit: LimitConfig = Field(default_factory=LimitConfig)
    fair_share: FairShareConfig = Field(default_factory=FairShareConfig)


class CacheConfig(Section):
    """The response cache in front of the queue: SQLite through aiosqlite, or Redis to share it
    between gateways."""

    enabled: bool = True
    backend: Literal["sqlite", "redis"] = "sqlite"
    path: str = "data/response-cache.sqlite3"
    ttl_s: float = Field(86_400.0, ge=1.0)
    max_entries: int = Field(10_000, ge=1)
    max_bytes: int = Field(104_857_600, ge=1024)
    mode: Literal["deterministic", "all", "off"] = "deterministic"
    normalize: bool = False
    casefold: bool = False
    namespace_by_key: bool = False
    purge_interval_s: float = Field(60.0, ge=0.1)


class ResponsesConfig(Section):
    """Stored responses of the Responses API (`store: true`, OpenAI's default), for
    `previous_response_id` and `GET /v1/responses/{id}`, per caller: one SQLite file, or Redis at
    `state.redis_url` so every gateway reads the same chains."""

    backend: Literal["sqlite", "redis"] = "sqlite"
    path: str = "data/responses.sqlite3"  # sqlite; the key that seals reasoning sits beside it either way
    ttl_s: float = Field(2_592_000.0, ge=1.0)  # 30 days, as OpenAI keeps them
    max_responses: int = Field(100_000, ge=1)  # past it, the oldest go first


class StateConfig(Section):
    """Where gateways share state: the cache with `cache.backend: redis`, rate limits and usage."""

    redis_url: str = "redis://127.0.0.1:6379/0"
    shared_limits: bool = False  # rpm, tpm and daily quotas counted across every gateway on redis_url
    shared_usage: bool = False  # /v1/usage and the page show every gateway's figures, kept across restarts
    sync_interval_s: float = Field(0.25, ge=0.01)  # how often each gateway pushes and reads the counts


class MonitorConfig(Section):
    """GPU memory sampling (pynvml) and the guard that pauses admissions near the limit."""

    gpu: bool = True
    interval_s: float = Field(2.0, ge=0.05)
    vram_high_pct: float = Field(90.0, ge=1.0, le=100.0)
    vram_resume_pct: float = Field(80.0, ge=0.0, le=100.0)


class AlertsConfig(Section):
    """Posts to a webhook when the average queue wait stays high, and when it recovers."""

    webhook_url: str = ""
    format: Literal["generic", "slack", "wecom"] = "generic"
    wait_s: float = Field(5.0, ge=0.0)
    for_s: float = Field(60.0, ge=0.0)
    cooldown_s: float = Field(600.0, ge=0.0)
    check_interval_s: float = Field(5.0, ge=0.05)


class LoggingConfig(Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    file: str = "logs/gpt-oss-webui.log"
    max_bytes: int = Field(10_485_760, ge=1024)
    backup_count: int = Field(5, ge=0)


class HistoryConfig(Section):
    """The conversations the page keeps on the server, per signed-in caller (or per browser on an
    open server): one SQLite file through aiosqlite, beside the response cache."""

    enabled: bool = Field(True, description="keep each caller's page conversations on the server")
    path: str = Field("data/conversations.sqlite3", description="the SQLite file, next to the response cache's")
    max_conversations: int = Field(1000, ge=1, description="conversations per caller; past it the least recently "
                                                           "used one goes first")
    max_messages: int = Field(1000, ge=2, description="messages per conversation; past it its oldest go first")


class UiConfig(Section):
    """The page's own settings (server.ui turns the page on)."""

    history: HistoryConfig = Field(default_factory=HistoryConfig, description="conversation history")


class Config(Section):
    server: ServerConfig = Field(default_factory=ServerConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    responses: ResponsesConfig = Field(default_factory=ResponsesConfig)
    state: StateConfig = Field(default_factory=StateConfig)
    monitor: MonitorConfig = Field(default_factory=MonitorConfig)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    ui: UiConfig = Field(default_factory=UiConfig)


def field_bounds(section: type[BaseModel], name: str) -> tuple[float | None, float | None]:
    """The allowed range of a setting, as declared above: for forms that edit it live."""
    lo = hi = None
    for item in section.model_fields[name].metadata:
        lo = item.ge if isinstance(item, Ge) else lo
        hi = item.le if isinstance(item, Le) else hi
    return lo, hi
