"""Anthropic's Messages API answers: the `message` object, its server-sent events (an
EventRenderer), and errors in Anthropic's shape with its statuses: a refusal for capacity (the
queue full, a promised wait too long) is 529 `overloaded_error`, which Claude Code and the SDKs
retry; a caller's own limit is 429 `rate_limit_error`."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from core.types import ToolCall
from pipeline.events import Finished, Queued, ReasoningDelta, Refused, Started, TextDelta, ToolCallPiece, Usage
from pipeline.refusal import Refusal
from protocols.openai_chat.render import queue_comment

Seal = Callable[[str], str]  # thinking text -> the signature that reads it back for this caller alone
CAPACITY = {"queue_full", "queue_displaced", "queue_timeout", "queue_wait_limit"}
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def status_of(refusal: Refusal) -> int:
    return 529 if refusal.code in CAPACITY else refusal.status


def error_body(refusal: Refusal) -> dict:
    status = status_of(refusal)
    kind = _TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    message = (
        f"{refusal.param}: {refusal.message}"
        if refusal.param and refusal.param not in refusal.message
        else refusal.message
    )
    return {"type": "error", "error": {"type": kind, "message": message}}


def sse(kind: str, payload: dict) -> str:
    return f"event: {kind}\ndata: {json.dumps(payload, separators=(',', ':'), ensure_ascii=False)}\n\n"


def usage(counts: Usage) -> dict:
    """Anthropic counts cache reads apart from the input: the engine's prefix-cache hits."""
    return {
        "input_tokens": counts.prompt_tokens - counts.cached_tokens,
        "output_tokens": counts.completion_tokens,
        "cache_read_input_tokens": counts.cached_tokens,
        "cache_creation_input_tokens": 0,
    }


def tool_use_id(call_id: str) -> str:
    return call_id if call_id.startswith("toolu_") else f"toolu_{call_id}"


def tool_input(arguments: str) -> dict:
    """The arguments as an object; a model's text that is not one goes back whole under `input`."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except (ValueError, RecursionError):  # a model's text nested past the parser's depth
        return {"input": arguments}
    return value if isinstance(value, dict) else {"input": value}


@dataclass
class MessageShape:
    """What every answer to one request shares: its id, the model, how thinking is shown."""

    model: str
    seal: Seal
    show_thinking: bool = True  # `thinking.display: omitted` sends the signature alone
    id: str = field(default_factory=lambda: new_id("msg"))

    def thinking_block(self, text: str) -> dict:
        return {"type": "thinking", "thinking": text if self.show_thinking else "", "signature": self.seal(text)}

    def message(self, finished: Finished) -> dict:
        content: list[dict] = [self.thinking_block(finished.reasoning)] if finished.reasoning else []
        if finished.text or not content + list(finished.tool_calls):  # thinking cut by max_tokens stands alone
            content.append({"type": "text", "text": finished.text})
        content += [_tool_use(call) for call in finished.tool_calls]
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            **stop_of(finished),
            "usage": usage(finished.usage),
        }


def stop_of(finished: Finished) -> dict:
    """`stop_reason` and `stop_sequence`: `stop_sequence` with the string where the answer ended on
    one of the request's `stop_sequences` (the pipeline keeps only those), else `end_turn`,
    `max_tokens` or `tool_use` with none."""
    if finished.stop_sequence is not None and finished.finish_reason == "stop":
        return {"stop_reason": "stop_sequence", "stop_sequence": finished.stop_sequence}
    return {"stop_reason": _STOP.get(finished.finish_reason, "end_turn"), "stop_sequence": None}


def _tool_use(call: ToolCall) -> dict:
    return {"type": "tool_use", "id": tool_use_id(call.id), "name": call.name, "input": tool_input(call.arguments)}


class MessageStream:
    """Anthropic's stream: `message_start`, then for each block `content_block_start`, its deltas
    (`thinking_delta` and a closing `signature_delta`, `text_delta`, `input_json_delta`) and
    `content_block_stop`, then `message_delta` (stop reason, usage) and `message_stop`; `ping`
    with the queue position as a comment while the request waits; `error` once the stream is open."""

    def __init__(self, shape: MessageShape, input_tokens: int) -> None:
        self.shape, self.input_tokens = shape, input_tokens
        self.index = -1
        self.open: str | None = None  # the kind of the block being written
        self.thinking = ""

    def begin(self) -> list[str]:
        message: dict = {
            "id": self.shape.id,
            "type": "message",
            "role": "assistant",
            "model": self.shape.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": 0},
        }
        return [sse("message_start", {"type": "message_start", "message": message})]

    async def queued(self, event: Queued) -> list[str]:
        return [queue_comment(event), sse("ping", {"type": "ping"})]

    async def started(self, event: Started) -> list[str]:
        return []

    async def reasoning(self, event: ReasoningDelta) -> list[str]:
        out = [] if self.open == "thinking" else self._start({"type": "thinking", "thinking": "", "signature": ""})
        self.thinking += event.text
        if not self.shape.show_thinking:
            return out
        return [*out, self._delta({"type": "thinking_delta", "thinking": event.text})]

    async def text(self, event: TextDelta) -> list[str]:
        out = [] if self.open == "text" else self._start({"type": "text", "text": ""})
        return [*out, self._delta({"type": "text_delta", "text": event.text})]

    async def tool_call(self, event: ToolCallPiece) -> list[str]:
        out: list[str] = []
        if event.id is not None:
            out = self._start({"type": "tool_use", "id": tool_use_id(event.id), "name": event.name or "", "input": {}})
        if event.arguments:
            out.append(self._delta({"type": "input_json_delta", "partial_json": event.arguments}))
        return out

    async def finished(self, event: Finished) -> list[str]:
        out = self._close()
        if self.index < 0:  # an empty answer is still one text block
            out += self._start({"type": "text", "text": ""}) + self._close()
        out.append(
            sse("message_delta", {"type": "message_delta", "delta": stop_of(event), "usage": usage(event.usage)})
        )
        return [*out, sse("message_stop", {"type": "message_stop"})]

    async def refused(self, event: Refused) -> list[str]:
        return [sse("error", error_body(event.refusal))]

    def _start(self, block: dict) -> list[str]:
        out = self._close()
        self.index += 1
        self.open = block["type"]
        return [
            *out,
            sse("content_block_start", {"type": "content_block_start", "index": self.index, "content_block": block}),
        ]

    def _delta(self, delta: dict) -> str:
        return sse("content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta})

    def _close(self) -> list[str]:
        if self.open is None:
            return []
        out = []
        if self.open == "thinking":
            out.append(self._delta({"type": "signature_delta", "signature": self.shape.seal(self.thinking)}))
            self.thinking = ""
        self.open = None
        return [*out, sse("content_block_stop", {"type": "content_block_stop", "index": self.index})]


_DURATION = re.compile(r"^(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?$")


def ratelimit_headers(openai_headers: dict[str, str], now: float | None = None) -> dict[str, str]:
    """OpenAI's `x-ratelimit-*` as Anthropic's `anthropic-ratelimit-*`: the same limits and what is
    left, the reset as an RFC 3339 time instead of a duration."""
    out: dict[str, str] = {}
    start = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    for kind in ("requests", "tokens"):
        for part in ("limit", "remaining"):
            if (value := openai_headers.get(f"x-ratelimit-{part}-{kind}")) is not None:
                out[f"anthropic-ratelimit-{kind}-{part}"] = value
        reset = _DURATION.match(openai_headers.get(f"x-ratelimit-reset-{kind}", "") or "-")
        if reset is not None:
            minutes, seconds, millis = (float(g or 0) for g in reset.groups())
            at = start + timedelta(minutes=minutes, seconds=seconds, milliseconds=millis)
            out[f"anthropic-ratelimit-{kind}-reset"] = at.isoformat().replace("+00:00", "Z")
    return out
