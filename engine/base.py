"""The engine protocol: what the scheduler needs from any backend, and nothing more."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from core.types import ChatMessage, Delta, GenParams, Prompt, Tool, ToolFormat
from settings.schema import EngineConfig


@dataclass(slots=True, frozen=True)
class Capabilities:
    """`token_budget`: KV tokens the engine holds (None: it manages its own memory, as an engine
    behind a network hop does, and admission counts slots only)."""

    model: str
    max_model_len: int
    token_budget: int | None
    supports_priority: bool
    block_size: int = 1
    supports_reasoning_effort: bool = False
    max_num_seqs: int = 0  # sequences the engine runs at once; 0: no fixed limit
    tool_format: ToolFormat | None = None  # None: the model cannot take tools
    unsupported_params: frozenset[str] = frozenset()  # request fields this engine cannot honour: a 400
    serial_prefill: bool = (
        False  # prompts prefill on the CPU threads that decode (llama.cpp, vLLM on a CPU): one lower at a time
    )
    batched_prefill: bool = True  # prompts prefilled in one step take less than one after another (not llama.cpp's)
    resumable: bool = False  # `suspend` frees a running sequence's slot and `resume` goes on where it stopped


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


class EngineRejected(EngineError):
    """The engine refused the request itself (an upstream's own 4xx): the client's to fix."""


class EngineOutOfMemory(EngineError):
    """The engine ran out of KV cache; admission control exists so this never happens."""


class EngineBackend(Protocol):
    @classmethod
    def from_config(cls, config: EngineConfig) -> EngineBackend: ...

    @property
    def ready(self) -> bool: ...

    @property
    def capabilities(self) -> Capabilities: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def prepare(
        self,
        messages: list[ChatMessage],
        reasoning_effort: str | None = None,
        tools: tuple[Tool, ...] = (),
        template_kwargs: dict | None = None,
    ) -> Prompt: ...

    async def prepare_text(self, text: str) -> Prompt:
        """A text completion's prompt: tokenized as given (the model's start token first, where it
        has one), no chat template. Its generation runs with `GenParams.raw`."""
        ...

    def generate(self, request_id: str, prompt: Prompt, params: GenParams) -> AsyncIterator[Delta]: ...

    async def abort(self, request_id: str) -> None: ...

    def suspend(self, request_id: str) -> None:
        """Frees a running sequence's slot and memory; its stream stays open and waits for `resume`
        (engines whose `resumable` is false raise EngineError)."""

    def resume(self, request_id: str) -> None:
        """Runs a suspended sequence again: its prompt and its answer so far prefilled anew, the
        stream going on where it stopped."""

    def stats(self) -> EngineStats: ...
