"""What a call yields, in order: Queued* (while it waits), Started, ReasoningDelta*, TextDelta* and
ToolCallPiece*, then Finished; or Refused at any point. Transports render these and nothing else."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar

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
    stop_sequence: str | None = None  # the request's own stop string that ended the answer, where the engine says


@dataclass(slots=True, frozen=True)
class Refused:
    refusal: Refusal
    partial_text: str = ""


Event = Queued | Started | ReasoningDelta | TextDelta | ToolCallPiece | Finished | Refused
Out = TypeVar("Out", covariant=True)


class EventRenderer(Protocol[Out]):
    """What a transport makes of each event (SSE lines, a stored state, the page's update): one
    method per kind, so a new kind of event is a type error in every renderer until it is
    handled, rather than an `isinstance` chain that quietly skips it."""

    async def queued(self, event: Queued) -> Out: ...

    async def started(self, event: Started) -> Out: ...

    async def reasoning(self, event: ReasoningDelta) -> Out: ...

    async def text(self, event: TextDelta) -> Out: ...

    async def tool_call(self, event: ToolCallPiece) -> Out: ...

    async def finished(self, event: Finished) -> Out: ...

    async def refused(self, event: Refused) -> Out: ...


async def render(event: Event, renderer: EventRenderer[Out]) -> Out:
    """The one place that tells the kinds of event apart."""
    if isinstance(event, Queued):
        return await renderer.queued(event)
    if isinstance(event, Started):
        return await renderer.started(event)
    if isinstance(event, ReasoningDelta):
        return await renderer.reasoning(event)
    if isinstance(event, TextDelta):
        return await renderer.text(event)
    if isinstance(event, ToolCallPiece):
        return await renderer.tool_call(event)
    if isinstance(event, Finished):
        return await renderer.finished(event)
    return await renderer.refused(event)


def is_final(event: Event) -> bool:
    """A call ends with exactly one of these; nothing follows it."""
    return isinstance(event, (Finished, Refused))
