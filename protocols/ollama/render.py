"""Ollama's answers: newline-delimited JSON objects, each a piece of the answer (`message` for
`/api/chat`, `response` for `/api/generate`), the last with `done: true`, the reason and the counts
and durations (nanoseconds); while the request waits, pieces with no text that carry `queue` (its
place), which Ollama's clients pass over. An error is `{"error": ...}`, as a body or a line."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from core.types import TokenLogprob, ToolCall
from pipeline.events import Finished, Queued, ReasoningDelta, Refused, Started, TextDelta, ToolCallPiece
from pipeline.refusal import Refusal

_DONE = {"length": "length"}  # anything else, tool calls included, Ollama calls "stop"


def created_at() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def error_body(refusal: Refusal) -> dict:
    message = refusal.message
    if refusal.param and refusal.param not in message:
        message = f"{refusal.param}: {message}"
    return {"error": message}


def line(payload: dict) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False) + "\n"


@dataclass
class AnswerShape:
    """How one answer is laid out: `chat` (a `message`) or generate (`response`, `thinking`)."""

    model: str
    chat: bool
    show_thinking: bool = True
    began: float = field(default_factory=time.monotonic)

    def piece(self, text: str = "", thinking: str = "", calls: tuple[ToolCall, ...] = ()) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "created_at": created_at()}
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if thinking and self.show_thinking:
                message["thinking"] = thinking
            if calls:
                message["tool_calls"] = [tool_call(c, i) for i, c in enumerate(calls)]
            body["message"] = message
        else:
            body["response"] = text
            if thinking and self.show_thinking:
                body["thinking"] = thinking
        return body

    def final(
        self, event: Finished, text: str = "", thinking: str = "", calls: tuple[ToolCall, ...] = ()
    ) -> dict[str, Any]:
        """The last object: the whole answer when not streamed, else an empty piece, with the totals.
        Durations: the queue wait and the prefill as Ollama's `prompt_eval_duration`, the decode
        (tokens over the measured rate) as `eval_duration`."""
        total = time.monotonic() - self.began
        decode = min(event.usage.completion_tokens / event.tokens_per_s if event.tokens_per_s else 0.0, total)
        return {
            **self.piece(text, thinking, calls),
            "done": True,
            "done_reason": _DONE.get(event.finish_reason, "stop"),
            "total_duration": _ns(total),
            "load_duration": 0,
            "prompt_eval_count": event.usage.prompt_tokens,
            "prompt_eval_duration": _ns(total - decode),
            "eval_count": event.usage.completion_tokens,
            "eval_duration": _ns(decode),
        }

    def whole(self, event: Finished) -> dict[str, Any]:
        body = self.final(event, event.text, event.reasoning, event.tool_calls)
        if event.logprobs is not None:
            body["logprobs"] = logprobs(event.logprobs)
        return body


def tool_call(call: ToolCall, index: int) -> dict[str, Any]:
    return {"id": call.id, "function": {"index": index, "name": call.name, "arguments": arguments(call.arguments)}}


def arguments(text: str) -> dict[str, Any]:
    """Ollama's clients take the arguments as an object; a model's text that is not one goes back
    whole under `input`, as the Messages API does."""
    try:
        value = json.loads(text) if text.strip() else {}
    except (ValueError, RecursionError):  # a model's text nested past the parser's depth
        return {"input": text}
    return value if isinstance(value, dict) else {"input": value}


def logprobs(tokens: tuple[TokenLogprob, ...]) -> list[dict[str, Any]]:
    return [
        {
            "token": t.token,
            "logprob": max(t.logprob, -9999.0),
            "top_logprobs": [{"token": s, "logprob": max(p, -9999.0)} for s, p in t.top],
        }
        for t in tokens
    ]


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


class AnswerStream:
    """The NDJSON lines of a streamed answer (an EventRenderer). Tool calls go out whole, on a
    line of their own before the last: Ollama's clients read their arguments as an object."""

    def __init__(self, shape: AnswerShape) -> None:
        self.shape = shape

    async def queued(self, event: Queued) -> list[str]:
        notice = {
            "position": event.position,
            "queue_length": event.queue_length,
            "estimated_wait_s": event.estimated_wait_s,
        }
        return [line({**self.shape.piece(), "done": False, "queue": notice})]

    async def started(self, event: Started) -> list[str]:
        return []

    async def reasoning(self, event: ReasoningDelta) -> list[str]:
        if not self.shape.show_thinking:
            return []
        return [line({**self.shape.piece(thinking=event.text), "done": False})]

    async def text(self, event: TextDelta) -> list[str]:
        body = {**self.shape.piece(event.text), "done": False}
        if event.logprobs is not None:
            body["logprobs"] = logprobs(event.logprobs)
        return [line(body)]

    async def tool_call(self, event: ToolCallPiece) -> list[str]:
        return []

    async def finished(self, event: Finished) -> list[str]:
        calls = [line({**self.shape.piece(calls=event.tool_calls), "done": False})] if event.tool_calls else []
        return [*calls, line(self.shape.final(event))]

    async def refused(self, event: Refused) -> list[str]:
        return [line(error_body(event.refusal))]
