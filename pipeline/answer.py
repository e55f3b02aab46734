"""An answer as it arrives from the engine: the totals a call finishes with, and the events each
delta makes. Tool calls are assembled from their pieces; a call turns `stop` into `tool_calls`."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.types import Delta, TokenLogprob, ToolCall, ToolCallDelta
from pipeline.events import Event, ReasoningDelta, TextDelta, ToolCallPiece


@dataclass(slots=True)
class _Call:
    id: str
    name: str
    arguments: str = ""


@dataclass(slots=True)
class Answer:
    """`one_call`: `parallel_tool_calls: false`; a model's second call in a turn is dropped."""

    with_logprobs: bool = False
    one_call: bool = False
    text: str = ""
    reasoning: str = ""
    tokens: int = 0
    reasoning_tokens: int = 0
    cached_tokens: int = 0
    tool_call_errors: int = 0
    logprobs: list[TokenLogprob] = field(default_factory=list)
    _calls: dict[int, _Call] = field(default_factory=dict)

    def add(self, delta: Delta) -> list[Event]:
        self.text += delta.text
        self.reasoning += delta.reasoning
        self.tokens += delta.num_tokens
        self.reasoning_tokens += delta.reasoning_tokens
        self.cached_tokens = max(self.cached_tokens, delta.cached_tokens)
        self.tool_call_errors += delta.tool_call_errors
        if delta.text:
            self.logprobs.extend(delta.logprobs)  # the answer's tokens only, as OpenAI gives them
        events: list[Event] = []
        if delta.reasoning:
            events.append(ReasoningDelta(delta.reasoning))
        if delta.text:
            events.append(TextDelta(delta.text, delta.logprobs if self.with_logprobs else None))
        events.extend(self._piece(piece) for piece in delta.tool_calls if not (self.one_call and piece.index))
        return events

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(ToolCall(c.id, c.name, c.arguments) for _, c in sorted(self._calls.items()))

    def finish_reason(self, engine_reason: str) -> str:
        return "tool_calls" if self._calls and engine_reason == "stop" else engine_reason

    def _piece(self, piece: ToolCallDelta) -> ToolCallPiece:
        call = self._calls.get(piece.index)
        if call is None:
            call = self._calls[piece.index] = _Call(piece.id or "", piece.name or "")
        call.arguments += piece.arguments
        return ToolCallPiece(piece.index, piece.id, piece.name, piece.arguments)
