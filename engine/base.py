"""The engine protocol: what the scheduler needs from any backend, and nothing more."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Literal, Protocol

Role = Literal["system", "user", "assistant"]
FinishReason = Literal["stop", "length", "abort"]


@dataclass(slots=True, frozen=True)
class ChatMessage:
    role: Role
    content: str


@dataclass(slots=True)
class GenParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    priority: int = 0  # lower runs first, as in vLLM


@dataclass(slots=True)
class Prompt:
    """A chat rendered by the engine: exact token count plus whatever the engine needs later."""

    num_tokens: int
    payload: Any = None


@dataclass(slots=True)
class Delta:
    """One step of output. `finish_reason` is set on the last delta only."""

    text: str
    num_tokens: int
    finish_reason: FinishReason | None = None
    cached_tokens: int = 0


@dataclass(slots=True, frozen=True)
class Capabilities:
    model: str
    max_model_len: int
    token_budget: int
    supports_priority: bool
    block_size: int = 1
    supports_reasoning_effort: bool = False
    max_num_seqs: int = 0  # sequences the engine runs at once; 0: no fixed limit


@dataclass(slots=True)
class EngineStats:
    running: int = 0
    waiting: int = 0
    kv_used_tokens: int = 0
    kv_usage: float = 0.0
    generated_tokens: int = 0
    prefix_cache_hit_rate: float | None = None


class EngineError(RuntimeError):
    """A request failed inside the engine."""


class EngineOutOfMemory(EngineError):
    """The engine ran out of KV cache; admission control exists so this never happens."""


class EngineBackend(Protocol):
    @property
    def ready(self) -> bool: ...

    @property
    def capabilities(self) -> Capabilities: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def prepare(self, messages: list[ChatMessage], reasoning_effort: str | None = None) -> Prompt: ...

    def generate(self, request_id: str, prompt: Prompt, params: GenParams) -> AsyncIterator[Delta]: ...

    async def abort(self, request_id: str) -> None: ...

    def stats(self) -> EngineStats: ...
