"""Typed configuration: one pydantic model per section, the single source of truth for every knob.

Each bound is declared once, here (`Field(ge=, le=)`): the loader names it in its one-line
errors and the page's operator form reads it. Each key's description is declared once, here too
(`Field(description=)`, a section's docstring): `scripts/config_docs.py` renders them into
docs/configuration.md and `python app.py --help-config`, so the reference cannot drift from the
code. Unknown keys are refused.

Over 300 lines on purpose: one key, its type, default, bounds and description per line or two,
every section in one file, so the whole configuration reads top to bottom in the order
config.yaml and the reference use.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, cast

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

    high: float = Field(ge=0.0, description="The high class.")
    medium: float = Field(ge=0.0, description="The medium class.")
    low: float = Field(ge=0.0, description="The low class.")

    def of(self, name: str) -> float:
        return float(getattr(self, name))


class Limits(Section):
    """What one caller may use; null is no limit. Tokens are prompt plus completion."""

    rpm: int | None = Field(
        None,
        ge=1,
        description=(
            "Requests per minute, over a sliding 60 s window (cache hits count); past it 429 `rate_limit_exceeded`. "
            "Token counts (`/tokenize`, `/v1/messages/count_tokens`) have a window of their own at the same rate."
        ),
    )
    tpm: int | None = Field(
        None,
        ge=1,
        description=(
            "Tokens per minute: the prompt counts when the queue takes the request, the completion when it ends; "
            "past it 429 `rate_limit_exceeded`."
        ),
    )
    max_parallel: int | None = Field(
        None,
        ge=1,
        description=("Requests running in the engine at once; more wait in the queue while others' requests run."),
    )
    max_queued: int | None = Field(
        None, ge=0, description=("Requests waiting at once; past it 429 `rate_limit_exceeded`.")
    )
    daily_tokens: int | None = Field(
        None,
        ge=1,
        description=("Tokens per UTC day; past it 429 `insufficient_quota`, with `Retry-After` until 00:00 UTC."),
    )

    def over(self, fallback: Limits) -> Limits:
        """These limits, each unset one taken from `fallback`."""
        return Limits(
            **{
                name: getattr(self, name) if getattr(self, name) is not None else getattr(fallback, name)
                for name in Limits.model_fields
            }
        )


class KeyConfig(Limits):
    """One named key, with a class and limits. `key_sha256` (hex) keeps the key itself out of the config."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$",
        description=("The caller's name in logs, metrics, `/v1/usage`, the queue status and the page (never the key)."),
    )
    key: str | None = Field(None, min_length=8, description="The key itself; give this or `key_sha256`.")
    key_sha256: str | None = Field(
        None,
        pattern=r"^[0-9a-fA-F]{64}$",
        description=('The key\'s SHA-256 in hex (`printf %s "$KEY" | sha256sum`), so the key stays out of the file.'),
    )
    priority_class: Literal["high", "medium", "low"] = Field(
        "medium",
        alias="class",
        description=(
            "The class its requests run as, and their ceiling: a header or body may ask for lower, never higher."
        ),
    )
    admin: bool = Field(
        False, description=("May change server-wide settings, clear the cache and read every caller's usage.")
    )
    metrics: bool = Field(
        False,
        description=(
            "May read `/metrics` (what a Prometheus scrape job's `authorization` sends) without being an admin."
        ),
    )

    @model_validator(mode="after")
    def _one_key(self) -> KeyConfig:
        if (self.key is None) == (self.key_sha256 is None):
            raise ValueError(f"key {self.name!r} needs exactly one of key and key_sha256")
        if self.name == "anonymous":
            raise ValueError("the name 'anonymous' is kept for callers without a key")
        return self


class ServerConfig(Section):
    """The HTTP server: where it listens, what a connection may send, and who may call."""

    host: str = Field("127.0.0.1", description="Bind address; `0.0.0.0` exposes the service to the network.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port.")
    max_body_bytes: int = Field(1_048_576, ge=1024, description="Largest request body; larger bodies get 413.")
    max_header_bytes: int = Field(
        32_768,
        ge=1024,
        description=("Largest request line and headers of one request; 431 `headers_too_large` past it."),
    )
    header_timeout_s: float = Field(
        10.0,
        ge=0.1,
        description=(
            "Time to receive a request's headers (also for a connection that sends nothing); "
            "past it 408 `request_timeout`, and the connection is closed."
        ),
    )
    body_timeout_s: float = Field(
        30.0,
        ge=0.1,
        description=("Time to receive a request's body; past it 408 `request_timeout`, and the connection is closed."),
    )
    keep_alive_s: float = Field(5.0, ge=0.1, description="How long an idle connection is kept between requests.")
    default_max_tokens: int = Field(
        1024,
        ge=1,
        description=("Answer length when a request sets no `max_tokens`, within the room left in the context."),
    )
    api_keys: StrList = Field(
        default_factory=list,
        description=(
            "When set, every `/v1` call and the page need one of these (or a priority, admin or named key). "
            "They are unnamed: `key-` and 8 hex digits of the key's SHA-256 stand for them."
        ),
    )
    admin_keys: StrList = Field(
        default_factory=list,
        description=("Keys allowed to change server-wide settings, clear the cache and read every caller's usage."),
    )
    keys: list[KeyConfig] = Field(
        default_factory=list,
        description=(
            "Named keys, each with a class and limits (docs/teams.md); when set, every call needs a known key."
        ),
    )
    key_file: str = Field(
        "",
        description=(
            'A YAML file of more named keys (a list, or a mapping with `keys`), kept apart from this file; `""`: none.'
        ),
    )
    default_limits: Limits = Field(default_factory=Limits, description="For every limit a named key leaves unset.")
    anonymous_limits: Limits = Field(
        default_factory=Limits, description=("For callers without a key, where keys are not required (an open server).")
    )
    cors_origins: StrList = Field(
        default_factory=list,
        description=(
            "Origins whose pages may call the API from a browser (`https://app.example`), never with credentials; "
            "`[]`: none."
        ),
    )
    ui: bool = Field(True, description="Serve the web page at `/`; false serves the API alone.")
    max_json_depth: int = Field(
        32,
        ge=4,
        le=256,
        description=(
            "Deepest nesting of a JSON schema (tool `parameters`, `response_format`, `text.format`) or of "
            "`chat_template_kwargs`; deeper is 400 `invalid_value`, checked before any library reads it."
        ),
    )
    max_schema_bytes: int = Field(
        65_536,
        ge=1024,
        description=(
            "Largest JSON schema one request carries (tools and output format together, as JSON); "
            "larger is 400 `invalid_value`."
        ),
    )
    metrics_public: bool = Field(
        False,
        description=(
            "With keys set, `/metrics` needs an admin key or a key with `metrics: true`; true opens it to anyone "
            "who can reach the port (it names every caller, with their requests and tokens)."
        ),
    )
    public_url: str = Field(
        "",
        description=(
            "The address people open the page at (`https://llm.example`); its origin is the one the sign-in "
            "form accepts besides the request's own host, and `https` marks the session cookie `Secure`."
        ),
    )
    forwarded_proto: bool = Field(
        False,
        description=("Trust `X-Forwarded-Proto` from a reverse proxy in front: `https` there marks cookies `Secure`."),
    )

    @model_validator(mode="after")
    def _unique_names(self) -> ServerConfig:
        names = [k.name for k in self.keys]
        if len(set(names)) != len(names):
            raise ValueError(f"key names must be unique; repeated: {sorted({n for n in names if names.count(n) > 1})}")
        return self


class SimConfig(Section):
    """The deterministic simulator engine (tests and benchmarks, not a model)."""

    model_name: str = Field("sim", description="The name clients send as `model`.")
    token_latency_ms: float = Field(20.0, ge=0.0, description="One decode step with one sequence running.")
    prefill_ms_per_token: float = Field(0.05, ge=0.0, description="Prefill cost per prompt token.")
    batch_slowdown: float = Field(
        0.03, ge=0.0, description=("Each extra running sequence slows a step by this fraction.")
    )
    kv_tokens: int = Field(
        65_536,
        ge=16,
        description=("KV capacity in tokens; exceeding it fails requests with out-of-memory, as a GPU would."),
    )
    max_model_len: int = Field(4096, ge=16, description="Context length.")
    max_num_seqs: int = Field(256, ge=1, description="Engine slots.")
    startup_s: float = Field(0.0, ge=0.0, description="Pretend model loading time (`/healthz` is 503 meanwhile).")
    natural_stop: bool = Field(
        True, description=("Answers end on their own (`finish_reason: stop`); false: always run to `max_tokens`.")
    )
    harmony: bool = Field(
        False, description=("Answer as gpt-oss does, in harmony's format: an analysis message, then a final one.")
    )


class VllmConfig(Section):
    """vLLM engine arguments (`AsyncEngineArgs`). `bundled:NAME` models ship inside a Python package (no
    download)."""

    model: str = Field(
        "bundled:smollm2-135m-instruct",
        description=(
            "A local folder, a Hugging Face id already in the local cache (never downloaded), or `bundled:NAME`."
        ),
    )
    served_model_name: str = Field("smollm2-135m-instruct", description="The name clients send as `model`.")
    models_dir: str = Field("models", description="Where bundled models are converted to, once.")
    tensor_parallel_size: int = Field(1, ge=1, le=64, description="GPUs each layer is split across.")
    pipeline_parallel_size: int = Field(
        1,
        ge=1,
        le=64,
        description=("Stages the layers are split into, over GPUs or nodes; times `tensor_parallel_size` GPUs in all."),
    )
    distributed_executor_backend: Literal["", "mp", "ray"] = Field(
        "", description=('`""`: vLLM\'s choice (`mp` on one node); `ray`: across nodes.')
    )
    max_num_seqs: int = Field(
        128, ge=1, le=4096, description=("Engine slots: the most the adaptive running limit may use.")
    )
    max_model_len: int = Field(2048, ge=16, description="Context length.")
    gpu_memory_utilization: float = Field(
        0.92,
        ge=0.05,
        le=1.0,
        description=("GPU share for weights and KV cache, used when `kv_cache_memory_bytes` is 0."),
    )
    block_size: int = Field(
        0, ge=0, le=1024, description=("KV block size; 0: vLLM's default (128 on the CPU, 16 on GPUs).")
    )
    enable_prefix_caching: bool = Field(True, description="Reuse the KV cache of repeated prompt prefixes.")
    enforce_eager: bool = Field(
        True,
        description=(
            "No torch.compile or CUDA graphs: right on the CPU, where compiling costs minutes and gains nothing "
            "(the `gpt-oss-20b` preset turns it off)."
        ),
    )
    kv_cache_memory_bytes: int = Field(
        0,
        ge=0,
        description=(
            "KV cache size; 0: on GPUs `gpu_memory_utilization`, on the CPU a tenth of the memory available at "
            "start, between 256 MiB and 4 GiB (engine/kv_size.py; logged at start)."
        ),
    )
    scheduling_policy: Literal["priority", "fcfs"] = Field(
        "priority", description=("`priority`: vLLM's own queue follows our priorities; `fcfs`: it does not.")
    )
    extra_args: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Any other `AsyncEngineArgs` field, e.g. `{dtype: bfloat16}`; an unknown one stops start-up naming it."
        ),
    )


class LlamaCppConfig(Section):
    """llama.cpp in process (xllamacpp): GGUF models on CPUs, Macs and GPUs without vLLM."""

    model: str = Field(
        "bundled:smollm2-135m-instruct",
        description=(
            "A local `.gguf` file, or `bundled:NAME` (the GGUF file inside its Python package); never downloaded."
        ),
    )
    served_model_name: str = Field("smollm2-135m-instruct", description="The name clients send as `model`.")
    n_parallel: int = Field(
        16,
        ge=1,
        le=512,
        description=("Sequences at once: the engine's slots, the most the adaptive running limit may use."),
    )
    kv_tokens: int = Field(
        32_768,
        ge=64,
        description=("KV cells all slots share: the token budget admission counts prompt plus `max_tokens` against."),
    )
    max_model_len: int = Field(2048, ge=16, description="One sequence's prompt plus answer, at most `kv_tokens`.")
    threads: int = Field(0, ge=0, description="CPU threads; 0: llama.cpp's choice (every core).")
    batch_tokens: int = Field(2048, ge=16, description="Prompt tokens per engine step.")
    gpu_layers: int = Field(
        -1, ge=-1, description=("Layers offloaded where the build has a GPU (CUDA, Metal); -1: all.")
    )
    extra_args: dict[str, Any] = Field(
        default_factory=dict, description=("Any other field of xllamacpp's `CommonParams`, e.g. `{n_ubatch: 256}`.")
    )

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
    """One OpenAI-compatible server behind the gateway; a bare URL is an entry with the defaults."""

    url: str = Field(pattern=r"^https?://\S+$", description="An OpenAI base URL, e.g. `http://host:8000/v1`.")
    api_key: str = Field("", description='The key sent to this upstream; `""`: none.')
    weight: float = Field(1.0, gt=0.0, description="Its share of the load relative to the other upstreams.")


class OpenAIUpstreamConfig(Section):
    """OpenAI-compatible servers (vLLM's first) behind this one; our scheduler keeps the order."""

    upstreams: Annotated[list[UpstreamEntry], BeforeValidator(_as_upstreams)] = Field(
        default_factory=list,
        description=("Base URLs, or `{url, api_key, weight}` entries: `[http://gpu1:8000/v1, http://gpu2:8000/v1]`."),
    )
    model: str = Field("", description='`""`: the model the first upstream serves.')
    max_model_len: int = Field(0, ge=0, description="0: what the upstream reports (vLLM does), else 4096.")
    slots_per_upstream: int = Field(
        128, ge=1, description=("Sequences each upstream runs at once; capacity is their sum.")
    )
    tokenize: bool = Field(
        True,
        description=(
            "Count prompt tokens by an upstream's `POST /tokenize` (vLLM's); false, or none answering: estimated."
        ),
    )
    send_priority: bool = Field(
        True,
        description=(
            "Pass the class down as vLLM's `priority` (needs `--scheduling-policy priority` there; FCFS refuses it)."
        ),
    )
    prefix_affinity: bool = Field(
        True,
        description=(
            "The same first message (a system prompt, one conversation) goes to the same upstream, for vLLM's "
            "prefix cache."
        ),
    )
    health_interval_s: float = Field(
        5.0,
        ge=0.1,
        description=("How often each upstream's `/v1/models` is checked; one good answer brings an ejected one back."),
    )
    metrics_interval_s: float = Field(
        1.0,
        ge=0.1,
        description=(
            "How often each upstream's `/metrics` (its running, waiting and KV use) is read to place requests."
        ),
    )
    eject_after: int = Field(
        2, ge=1, description=("Failures in a row, of checks or requests, that take an upstream out.")
    )
    connect_timeout_s: float = Field(5.0, ge=0.1, description="Time to connect to an upstream.")
    retries: int = Field(
        2, ge=0, description=("Other upstreams tried for a request that failed before its first token.")
    )


class EngineConfig(Section):
    """What generates the tokens: one engine, chosen by `backend`, and each engine's own settings."""

    backend: Literal["auto", "vllm", "llamacpp", "sim", "openai"] = Field(
        "auto",
        description=(
            "`auto`: `vllm` with an NVIDIA GPU, else `llamacpp`; `openai`: OpenAI-compatible servers behind this "
            "one; `sim`: the simulator (tests and benchmarks)."
        ),
    )
    vllm: VllmConfig = Field(default_factory=VllmConfig)
    llamacpp: LlamaCppConfig = Field(default_factory=LlamaCppConfig)
    sim: SimConfig = Field(default_factory=SimConfig)
    openai: OpenAIUpstreamConfig = Field(default_factory=OpenAIUpstreamConfig)


class PressureConfig(Section):
    """Emergency mode: entered when the queue is under pressure, left when it is gone."""

    interval_s: float = Field(5.0, ge=0.05, description="How often pressure is sampled.")
    avg_wait_s: float = Field(3.0, ge=0.0, description="Enter when the average wait exceeds this...")
    high_waiting: int = Field(3, ge=1, description="...or when this many high requests wait.")
    high_boost: float = Field(
        1.5,
        ge=1.0,
        description="High requests' weight multiplier in emergency mode (those waiting when it begins too).",
    )
    low_max_wait_s: float = Field(
        20.0,
        ge=0.1,
        description=("In emergency mode, the longest wait the door promises a new low request; predicted longer: 429."),
    )
    high_max_wait_s: float = Field(
        0.0,
        ge=0.0,
        description=(
            "In emergency mode, the longest wait the door promises a new high request; predicted longer: 429 with "
            "Retry-After. 0: what `slo.ttft_s` leaves after the time highs take from start to first token lately, "
            "since a high that waits longer misses its first-token objective."
        ),
    )


class SloConfig(Section):
    """Latency objectives: what an admitted request is promised."""

    tpot_s: float = Field(0.1, ge=0.001, description=("Time per output token; the adaptive running limit keeps it."))
    ttft_s: float = Field(1.0, ge=0.01, description="Time to first token, for the high class.")


class LimitConfig(Section):
    """The adaptive running limit: how many sequences the engine may hold while TPOT stays within
    the objective."""

    adaptive: bool = Field(
        True,
        description=(
            "Adapt the running limit to TPOT; false: run `scheduler.max_concurrency` (or the engine's slots) at "
            "once, always."
        ),
    )
    initial: int = Field(16, ge=1, le=4096, description="Where the limit starts, before anything is measured.")
    pace_path: str = Field(
        "data/engine-pace.sqlite3",
        description=(
            "SQLite file keeping what the limit learned of the engine (its TPOT line, its pace alone, the limit "
            "it found) across restarts, per engine, model and machine, so a restarted server starts where the last "
            "one left off rather than at `initial`; empty: every start learns afresh."
        ),
    )
    headroom: float = Field(
        0.1,
        ge=0.0,
        le=0.9,
        description=("How far under `slo.tpot_s` the set point starts (0.1: 10 %); then trimmed by `on_time_share`."),
    )
    on_time_share: float = Field(
        0.9,
        ge=0.0,
        le=0.99,
        description=(
            "The share of requests whose own TPOT the set point is trimmed to keep within the objective "
            "(0: a fixed headroom)."
        ),
    )
    interval_s: float = Field(1.0, ge=0.05, description="Control period: one step of the limit per interval.")
    demand_window_s: float = Field(
        20.0,
        ge=0.0,
        description=(
            "Seconds the interactive load (requests running or waiting) is averaged over; while the engine alone "
            "would keep TPOT within the objective at that mean, as the fitted TPOT line predicts, the limit does not "
            "hold lower classes back (bursts run at once, as on the engine alone); once a burst's slots are taken back, "
            "none is lent again for as long; 0: the limit always binds."
        ),
    )
    high_reserve: float = Field(
        0.1,
        ge=0.0,
        le=0.9,
        description=(
            "Share of the running limit (rounded down) and of the queue kept from low and medium requests; high "
            "counts only its own class against the limit."
        ),
    )
    take_back: bool = Field(
        True,
        description=(
            "On engines that can resume a sequence (vLLM, llama.cpp, the simulator): when a high request finds no "
            "slot or memory, the newest running medium or low request gives its slot up (suspended, its answer so "
            "far kept, resumed later where it stopped)."
        ),
    )


class BackgroundConfig(Section):
    """Background work (batch lines): alone it fills the engine, beside interactive requests it takes
    only what slows them by `slowdown`, and it yields the rest the moment they come."""

    slowdown: float = Field(
        0.1,
        ge=0.0,
        le=10.0,
        description=(
            "How much longer interactive requests' time per output token may grow with background work beside "
            "them (0.1: 10 %), as the fitted line of TPOT against the batch predicts; 0: background runs only "
            "while no interactive request does."
        ),
    )
    quiet_s: float = Field(
        2.0, ge=0.0, description=("Seconds without an interactive request before background work may fill the engine.")
    )


class FairShareConfig(Section):
    """Inside a class, the least-served caller goes next (service = weighted tokens)."""

    enabled: bool = Field(True, description="False: each class is first come, first served.")
    input_weight: float = Field(
        1.0, ge=0.0, description=("Service = input_weight x prompt tokens + output_weight x output tokens.")
    )
    output_weight: float = Field(2.0, ge=0.0, description="The weight of an output token in a caller's service.")


class SchedulerConfig(Section):
    """The queue in front of the engine: order, the door's promises, and how much runs at once."""

    max_concurrency: int = Field(
        0, ge=0, le=4096, description=("Upper bound of the adaptive running limit; 0: the engine's slots.")
    )
    max_queue_size: int = Field(
        256, ge=1, le=1_000_000, description=("Waiting requests; more get 429 `queue_full` with `Retry-After`.")
    )
    max_wait_s: PerClass = Field(
        default_factory=lambda: PerClass(high=300.0, medium=120.0, low=60.0),
        description=("Longest wait promised, per class; a request predicted to wait longer gets 429 at the door."),
    )
    weights: PerClass = Field(
        default_factory=lambda: PerClass(high=10.0, medium=5.0, low=1.0), description=("Class scores.")
    )
    aging_per_s: float = Field(
        0.25,
        ge=0.0,
        description=(
            "Score gained per second of waiting: with the default weights a low request outranks a fresh high one "
            "after 36 s."
        ),
    )
    short_bonus: float = Field(
        2.5,
        ge=0.0,
        description=(
            "Added to the score of a short deterministic request (`max_tokens <= short_max_tokens`, temperature 0)."
        ),
    )
    short_max_tokens: int = Field(64, ge=1, description="The most `max_tokens` of a request that counts as short.")
    priority_keys: StrList = Field(default_factory=list, description="API keys whose requests run as high.")
    lower_prefills: int = Field(
        0,
        ge=0,
        le=4096,
        description=(
            "Medium and low requests that may be prefilling at once (started, no first token yet) while high requests "
            "come (one within the last five minutes); 0: the engine's "
            "choice, 1 on llama.cpp and on vLLM's CPU build (prompts prefill on the threads that decode, so a high "
            "prompt waits for every prompt beside it), any number on vLLM on a GPU and the simulator."
        ),
    )
    pressure: PressureConfig = Field(default_factory=PressureConfig)
    slo: SloConfig = Field(default_factory=SloConfig)
    limit: LimitConfig = Field(default_factory=LimitConfig)
    fair_share: FairShareConfig = Field(default_factory=FairShareConfig)
    background: BackgroundConfig = Field(default_factory=BackgroundConfig)


class SimilarCacheConfig(Section):
    """Similar questions: after an exact miss, reuse a stored answer to a request that differs only
    in the last user message's wording (MinHash LSH candidates, then guards; lexical only, no
    embedding model). SQLite backend only."""

    enabled: bool = Field(
        False,
        description=(
            'Answer near-duplicate questions from the cache (`X-Cache: SIMILAR`); per request `"cache": "exact"` '
            "or `Cache-Control: no-cache` opts out."
        ),
    )
    threshold: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description=(
            "Least Jaccard similarity of the two texts' word (English) or character (Chinese) shingles for a hit; "
            "chosen from bench/similar_cache.py."
        ),
    )
    lsh_threshold: float = Field(
        0.25,
        ge=0.05,
        le=1.0,
        description=(
            "The LSH's candidate threshold (at or below `threshold`, so the index does not lose hits it would pass)."
        ),
    )
    num_perm: int = Field(
        32, ge=16, le=512, description="MinHash permutations per entry: more is more exact and more memory."
    )
    max_candidates: int = Field(
        8, ge=1, le=100, description="Candidates above `threshold` the guards examine per lookup."
    )


class CacheConfig(Section):
    """The response cache in front of the queue: SQLite through aiosqlite, or Redis to share it
    between gateways."""

    enabled: bool = Field(True, description="Answer repeated requests without touching the engine.")
    backend: Literal["sqlite", "redis"] = Field(
        "sqlite", description=("`sqlite`: one file; `redis`: shared by every gateway on `state.redis_url`.")
    )
    path: str = Field("data/response-cache.sqlite3", description="The SQLite file.")
    ttl_s: float = Field(86_400.0, ge=1.0, description="Entry lifetime (24 h).")
    max_entries: int = Field(
        10_000,
        ge=1,
        description=("Past it, the least recently used entries go first (SQLite; on Redis, its `maxmemory`)."),
    )
    max_bytes: int = Field(
        104_857_600,
        ge=1024,
        description=("Stored bytes (100 MiB); past it, the least recently used entries go first (SQLite)."),
    )
    mode: Literal["deterministic", "all", "off"] = Field(
        "deterministic", description=("`deterministic`: only requests at temperature 0 or with a `seed`; `all`; `off`.")
    )
    normalize: bool = Field(
        False,
        description=(
            "Unicode NFC and collapsed whitespace before hashing: higher hit rates, and prompts differing only so "
            "share one answer."
        ),
    )
    casefold: bool = Field(False, description="With `normalize`: also ignore case.")
    namespace_by_key: bool = Field(
        True,
        description=(
            "A separate cache per API key, so one user's answers are never served to another; false: one cache "
            "for the whole team (higher hit rates, and a key's answers reach every other key)."
        ),
    )
    purge_interval_s: float = Field(60.0, ge=0.1, description="How often expired entries are deleted.")
    similar: SimilarCacheConfig = Field(
        default_factory=SimilarCacheConfig, description=("Near-duplicate questions answered from the cache.")
    )

    @model_validator(mode="after")
    def _similar_needs_sqlite(self) -> CacheConfig:
        if self.similar.enabled and self.backend == "redis":
            raise ValueError(
                "cache.similar.enabled needs cache.backend sqlite: the similar index lives in each "
                "gateway's memory and Redis evicts entries without telling it"
            )
        return self


class ResponsesConfig(Section):
    """Stored responses of the Responses API (`store: true`, OpenAI's default), for
    `previous_response_id` and `GET /v1/responses/{id}`, per caller: one SQLite file, or Redis at
    `state.redis_url` so every gateway reads the same chains."""

    backend: Literal["sqlite", "redis"] = Field(
        "sqlite", description=("`sqlite`: one file; `redis`: on `state.redis_url`, shared by every gateway.")
    )
    path: str = Field(
        "data/responses.sqlite3",
        description=("The SQLite file; the key that seals reasoning sits beside it (`.key`) either way."),
    )
    ttl_s: float = Field(2_592_000.0, ge=1.0, description="How long a response is kept: 30 days, as OpenAI keeps them.")
    max_responses: int = Field(100_000, ge=1, description="Past it, the oldest go first.")
    max_per_caller: int = Field(
        10_000,
        ge=1,
        description=(
            "Past it, a caller's own oldest go first: one caller storing response after response does not push "
            "out everyone else's."
        ),
    )
    max_bytes: int = Field(
        4_294_967_296,
        ge=1_048_576,
        description="Bytes of stored responses in all (4 GiB: each one's input items and output); past it, the oldest go first.",
    )
    max_bytes_per_caller: int = Field(
        1_073_741_824,
        ge=65_536,
        description="Bytes of one caller's stored responses (1 GiB); past it, the caller's own oldest go first.",
    )


class UsageConfig(Section):
    """The usage ledger on disk: per caller and minute (hours past two days), so `/v1/usage` and
    the daily quotas survive restarts and crashes."""

    path: str = Field("data/usage.sqlite3", description="The SQLite file; empty: usage in memory only (7 days).")
    retention_days: float = Field(90.0, ge=1.0, le=3650.0, description="How long usage is kept on disk.")
    flush_interval_s: float = Field(
        1.0, ge=0.05, le=60.0, description=("How often recorded usage is written: a crash loses at most this much.")
    )


class BatchConfig(Section):
    """OpenAI's Batch API (`/v1/files`, `/v1/batches`): input files and batches per caller in one
    SQLite file; lines run on capacity the interactive classes leave."""

    path: str = Field("data/batches.sqlite3", description="The SQLite file of files, batches and each line's result.")
    max_file_bytes: int = Field(104_857_600, ge=1024, description="Largest uploaded file: 100 MiB.")
    max_lines: int = Field(50_000, ge=1, description="Most requests in one batch input file, as OpenAI allows.")
    max_files: int = Field(
        1_000,
        ge=1,
        description=(
            "Files kept per caller (uploads and results); past it an upload is refused until some are deleted."
        ),
    )
    max_bytes: int = Field(2_147_483_648, ge=1024, description="Bytes of files kept per caller: 2 GiB, likewise.")
    max_batches: int = Field(1_000, ge=1, description="Batches kept per caller; past it, its oldest finished go.")
    max_unfinished: int = Field(10, ge=1, description="Batches per caller not yet ended; more are refused (429).")
    retention_s: float = Field(
        2_592_000.0, ge=60.0, description="How long files and finished batches are kept: 30 days."
    )
    completion_window_s: float = Field(
        86_400.0,
        ge=1.0,
        description=(
            "`completion_window: 24h`: a batch unfinished after this is `expired`, its unanswered lines reported."
        ),
    )
    max_parallel: int = Field(
        0,
        ge=0,
        le=4096,
        description=("Batch lines in the engine at once at most; 0: as many as the running limit leaves free."),
    )


class StateConfig(Section):
    """Where gateways share state: the cache with `cache.backend: redis`, rate limits and usage."""

    redis_url: str = Field("redis://127.0.0.1:6379/0", description="The Redis every gateway shares.")
    shared_limits: bool = Field(
        False, description=("`rpm`, `tpm` and daily quotas counted across every gateway on `redis_url`.")
    )
    shared_usage: bool = Field(
        False,
        description=("`/v1/usage` and the page show every gateway's figures, kept on Redis 7 days, across restarts."),
    )
    sync_interval_s: float = Field(
        0.25, ge=0.01, description=("How often each gateway pushes its counts and reads the totals.")
    )


class MonitorConfig(Section):
    """GPU memory sampling (pynvml) and the guard that pauses admissions near the limit."""

    gpu: bool = Field(
        True, description=("Sample GPU memory with pynvml (without a GPU or NVML: logged once, then out of the way).")
    )
    interval_s: float = Field(2.0, ge=0.05, description="Sampling period.")
    vram_high_pct: float = Field(
        90.0,
        ge=1.0,
        le=100.0,
        description=("Above this on any GPU, admissions pause (the queue keeps filling; nothing is dropped)."),
    )
    vram_resume_pct: float = Field(80.0, ge=0.0, le=100.0, description="Below this on every GPU, admissions resume.")


class AlertsConfig(Section):
    """Posts to a webhook when the average queue wait stays high, and when it recovers."""

    webhook_url: str = Field("", description='Where alerts are posted; `""`: no alerts.')
    format: Literal["generic", "slack", "wecom"] = Field(
        "generic", description=("`generic` JSON, `slack` (an incoming webhook) or `wecom` (a WeCom group robot).")
    )
    wait_s: float = Field(5.0, ge=0.0, description="Alert when the average queue wait stays above this...")
    for_s: float = Field(60.0, ge=0.0, description="...for this long.")
    cooldown_s: float = Field(600.0, ge=0.0, description="No second alert within this time.")
    check_interval_s: float = Field(5.0, ge=0.05, description="How often the wait is checked.")


class LoggingConfig(Section):
    """Log lines to stdout and a rotating file; keys and tokens are masked in every line."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description=("`INFO`: one line per request outcome; `DEBUG` adds every enqueue and dispatch.")
    )
    file: str = Field("logs/gpt-oss-webui.log", description='The rotating log file; `""`: stdout only.')
    max_bytes: int = Field(10_485_760, ge=1024, description="Size at which the file rotates (10 MiB).")
    backup_count: int = Field(5, ge=0, description="Rotated files kept.")


class HistoryConfig(Section):
    """The conversations the page keeps on the server, per signed-in caller (or per browser on an
    open server): one SQLite file through aiosqlite, beside the response cache."""

    enabled: bool = Field(True, description="keep each caller's page conversations on the server")
    path: str = Field("data/conversations.sqlite3", description="the SQLite file, next to the response cache's")
    max_conversations: int = Field(
        1000, ge=1, description="conversations per caller; past it the least recently used one goes first"
    )
    max_messages: int = Field(1000, ge=2, description="messages per conversation; past it its oldest go first")
    max_bytes: int = Field(
        268_435_456,
        ge=65_536,
        description=(
            "bytes of conversations per caller (256 MiB: text, reasoning, details, titles and settings); past it the "
            "least recently used go first, then the oldest messages of the one being written"
        ),
    )
    max_total_bytes: int = Field(
        4_294_967_296,
        ge=1_048_576,
        description=(
            "bytes of every caller's conversations together (4 GiB); past it the least recently used go, whoever's, "
            "until a tenth under it"
        ),
    )


class UiConfig(Section):
    """The page's own settings (server.ui turns the page on)."""

    history: HistoryConfig = Field(default_factory=HistoryConfig, description="conversation history")
    max_upload_bytes: int = Field(
        52_428_800,
        ge=1024,
        description=(
            "Largest file the page accepts (a conversation import, a batch's prompts); larger is refused at upload."
        ),
    )
    max_upload_store_bytes: int = Field(
        2_147_483_648,
        ge=1_048_576,
        description=(
            "Bytes of uploads kept on disk in all (2 GiB); past it, the oldest file of the session holding the "
            "most goes (a file is kept only for the session that uploaded it to use)."
        ),
    )


class Config(Section):
    """The whole configuration: config.yaml over these defaults, then a preset, then `--set`."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    responses: ResponsesConfig = Field(default_factory=ResponsesConfig)
    batches: BatchConfig = Field(default_factory=BatchConfig)
    usage: UsageConfig = Field(default_factory=UsageConfig)
    state: StateConfig = Field(default_factory=StateConfig)
    monitor: MonitorConfig = Field(default_factory=MonitorConfig)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    ui: UiConfig = Field(default_factory=UiConfig)


def field_bounds(section: type[BaseModel], name: str) -> tuple[float, float]:
    """The allowed range of a setting, as declared above (infinite where a side is open): for
    forms that edit it live. The numbers keep their declared type, so an int shows as one."""
    lo, hi = -math.inf, math.inf
    for item in section.model_fields[name].metadata:
        lo = cast(float, item.ge) if isinstance(item, Ge) else lo
        hi = cast(float, item.le) if isinstance(item, Le) else hi
    return lo, hi
