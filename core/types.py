"""A chat, how to sample its answer, and the answer as it streams: shared by the engines, the
scheduler and the pipeline, owned by none of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

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
    """One step of output: `text` is the answer; `finish_reason` is set on the last delta only."""

    text: str
    num_tokens: int
    finish_reason: FinishReason | None = None
    cached_tokens: int = 0
    reasoning: str = ""  # thinking, from models that write it on its own channel (gpt-oss)
    reasoning_tokens: int = 0
