"""OpenAI response objects: chat.completion, chat.completion.chunk, usage, SSE framing."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Callable

from engine.base import Delta


@dataclass(slots=True)
class Completion:
    request_id: str
    model: str
    created: int
    prompt_tokens: int
    text: str = ""
    completion_tokens: int = 0
    cached_tokens: int = 0
    finish_reason: str | None = None
    on_finish: Callable[[Completion], None] | None = None

    @classmethod
    def start(cls, request_id: str, model: str, prompt_tokens: int) -> Completion:
        return cls(request_id, model, int(time.time()), prompt_tokens)

    def add(self, delta: Delta) -> None:
        self.text += delta.text
        self.completion_tokens += delta.num_tokens
        self.cached_tokens = max(self.cached_tokens, delta.cached_tokens)
        self.finish_reason = delta.finish_reason or self.finish_reason
        if delta.finish_reason and self.on_finish is not None:
            self.on_finish(self)

    def usage(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": self.cached_tokens}}

    def body(self) -> dict:
        return {
            "id": self.request_id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": self.text},
                         "logprobs": None, "finish_reason": self.finish_reason}],
            "usage": self.usage(),
        }

    def chunk(self, delta: dict, finish_reason: str | None = None, with_usage_field: bool = False) -> str:
        body = {
            "id": self.request_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        if with_usage_field:
            body["usage"] = None
        return sse(body)

    def usage_chunk(self) -> str:
        return sse({"id": self.request_id, "object": "chat.completion.chunk", "created": self.created,
                    "model": self.model, "choices": [], "usage": self.usage()})


def sse(payload: dict) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def sse_comment(text: str) -> str:
    return f": {text}\n\n"


SSE_DONE = "data: [DONE]\n\n"
