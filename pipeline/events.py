"""What a call yields, in order: Queued* (while it waits), Started, ReasoningDelta*, TextDelta* and
ToolCallPiece*, then Finished; or Refused at any point. Transports render these and nothing else."""

from __future__ import annotations

from dataclasses import dataclass

from core.types import TokenLogprob, ToolCall
from pipeline.refusal import Refusal


@dataclass(slots=True, frozen=True)
class Queued:
    position: int
    queue_length: int
    estimated_wait_s: float | None
    waited_s: float


@dataclass(slots=True, frozen=True)
class Started:
    queue_wait_s: float
    priority: str  # the class the call runs at


@dataclass(slots=True, frozen=True)
class TextDelta:
    text: str
    logprobs: tuple[TokenLogprob, ...] | None = None  # None: not asked for


@dataclass(slots=True, frozen=True)
class ToolCallPiece:
    """A piece of a tool call: the first of a call has its id and name, later ones argument text."""

    index: int
    id: str | None
    name: str | None
    arguments: str


@dataclass(slots=True, frozen=True)
class ReasoningDelta:
    """Thinking, from models that write it apart from the answer (gpt-oss's analysis channel)."""

    text: str


@dataclass(slots=True, frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    reasoning_tokens: int = 0


@dataclass(slots=True, frozen=True)
class Finished:
    text: str
    finish_reason: str
    usage: Usage
    cached: bool
    queue_wait_s: float
    tokens_per_s: float | None = None
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    logprobs: tuple[TokenLogprob, ...] | None = None
    similarity: float | None = None  # another request's stored answer, to a question this similar


@dataclass(slots=True, frozen=True)
class Refused:
    refusal: Refusal
    partial_text: str = ""


Event = Queued | Started | ReasoningDelta | TextDelta | ToolCallPiece | Finished | Refused
