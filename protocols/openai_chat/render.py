"""OpenAI response objects: chat.completion, chat.completion.chunk, usage, SSE framing."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from core.types import TokenLogprob
from pipeline.events import Finished, Queued, ReasoningDelta, Refused, Started, TextDelta, ToolCallPiece, Usage
from pipeline.refusal import Refusal


@dataclass(slots=True, frozen=True)
class CompletionFormat:
    """`include_reasoning`: the model's thinking goes out as `reasoning_content` (the field vLLM and
    DeepSeek use), on the message and on stream deltas, only where the model wrote some."""

    request_id: str
    model: str
    created: int
    include_reasoning: bool = True
    _text_head: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        head = sse(
            {
                "id": self.request_id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
            }
        )
        object.__setattr__(
            self, "_text_head", head[: -len('"choices":[]}\n\n')] + '"choices":[{"index":0,"delta":{"content":'
        )

    @classmethod
    def start(cls, request_id: str, model: str, include_reasoning: bool = True) -> CompletionFormat:
        return cls(request_id, model, int(time.time()), include_reasoning)

    def body(self, finished: Finished) -> dict:
        content = finished.text if finished.text or not finished.tool_calls else None
        message: dict = {"role": "assistant", "content": content, "refusal": None}
        if finished.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in finished.tool_calls
            ]
        if finished.reasoning and self.include_reasoning:
            message["reasoning_content"] = finished.reasoning
        return {
            "id": self.request_id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": logprobs(finished.logprobs),
                    "finish_reason": finished.finish_reason,
                }
            ],
            "usage": usage(finished.usage),
        }

    def chunk(
        self,
        delta: dict,
        finish_reason: str | None = None,
        with_usage_field: bool = False,
        token_logprobs: tuple[TokenLogprob, ...] | None = None,
    ) -> str:
        body = {
            "id": self.request_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": logprobs(token_logprobs), "finish_reason": finish_reason}
            ],
        }
        if with_usage_field:
            body["usage"] = None
        return sse(body)

    def text_chunk(self, text: str, with_usage_field: bool = False) -> str:
        """`chunk({"content": text})` without logprobs, from a template made once per answer: this
        is the chunk of nearly every token, and building and encoding its whole dict each time
        was a measurable part of our CPU per token."""
        tail = ',"usage":null}\n\n' if with_usage_field else "}\n\n"
        return f'{self._text_head}{json.dumps(text)}}},"logprobs":null,"finish_reason":null}}]{tail}'

    def usage_chunk(self, counts: Usage) -> str:
        return sse(
            {
                "id": self.request_id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage(counts),
            }
        )


def tool_call_delta(piece: ToolCallPiece) -> dict:
    """The first piece of a call names it (arguments ""); later pieces carry argument text only."""
    if piece.id is None:
        return {"index": piece.index, "function": {"arguments": piece.arguments}}
    return {
        "index": piece.index,
        "id": piece.id,
        "type": "function",
        "function": {"name": piece.name, "arguments": piece.arguments},
    }


def logprobs(tokens: tuple[TokenLogprob, ...] | None) -> dict | None:
    if tokens is None:
        return None
    return {
        "content": [
            {**_logprob(t.token, t.logprob), "top_logprobs": [_logprob(s, p) for s, p in t.top]} for t in tokens
        ],
        "refusal": None,
    }


def _logprob(token: str, logprob: float) -> dict:
    return {"token": token, "logprob": max(logprob, -9999.0), "bytes": list(token.encode("utf-8"))}


def usage(counts: Usage) -> dict:
    return {
        "prompt_tokens": counts.prompt_tokens,
        "completion_tokens": counts.completion_tokens,
        "total_tokens": counts.prompt_tokens + counts.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": counts.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": counts.reasoning_tokens},
    }


def sse(payload: dict) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def sse_comment(text: str) -> str:
    return f": {text}\n\n"


SSE_DONE = "data: [DONE]\n\n"


def queue_comment(event: Queued) -> str:
    eta = "unknown" if event.estimated_wait_s is None else event.estimated_wait_s
    return sse_comment(f"queue position={event.position} estimated_wait_s={eta}")


def dispatched_notice(event: Started, waited: bool) -> list[str]:
    """A stream that waited says when it left the queue, and after how long."""
    return [sse_comment(f"dispatched queue_wait_ms={event.queue_wait_s * 1000:.0f}")] if waited else []


class ChatStream:
    """A chat completion's server-sent events: queue notices as comments while it waits, then the
    chunks, then `[DONE]`; a refusal after the stream opened is one `data:` line with the error."""

    def __init__(self, fmt: CompletionFormat, include_usage: bool) -> None:
        self.fmt, self.include_usage = fmt, include_usage
        self.waited = False

    async def queued(self, event: Queued) -> list[str]:
        self.waited = True
        return [queue_comment(event)]

    async def started(self, event: Started) -> list[str]:
        notice = dispatched_notice(event, self.waited)
        return [*notice, self.fmt.chunk({"role": "assistant", "content": ""}, with_usage_field=self.include_usage)]

    async def reasoning(self, event: ReasoningDelta) -> list[str]:
        if not self.fmt.include_reasoning:
            return []
        return [self.fmt.chunk({"reasoning_content": event.text}, with_usage_field=self.include_usage)]

    async def text(self, event: TextDelta) -> list[str]:
        if event.logprobs is None:
            return [self.fmt.text_chunk(event.text, self.include_usage)]
        return [
            self.fmt.chunk({"content": event.text}, with_usage_field=self.include_usage, token_logprobs=event.logprobs)
        ]

    async def tool_call(self, event: ToolCallPiece) -> list[str]:
        return [self.fmt.chunk({"tool_calls": [tool_call_delta(event)]}, with_usage_field=self.include_usage)]

    async def finished(self, event: Finished) -> list[str]:
        last = self.fmt.chunk({}, event.finish_reason, with_usage_field=self.include_usage)
        return [last, *([self.fmt.usage_chunk(event.usage)] if self.include_usage else []), SSE_DONE]

    async def refused(self, event: Refused) -> list[str]:
        return [sse(error_body(event.refusal))]


_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    415: "invalid_request_error",
    431: "invalid_request_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


def error_body(refusal: Refusal) -> dict:
    return {
        "error": {
            "message": refusal.message,
            "type": _TYPES.get(refusal.status, "server_error"),
            "param": refusal.param,
            "code": refusal.code,
        }
    }
