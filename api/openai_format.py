"""OpenAI response objects: chat.completion, chat.completion.chunk, usage, SSE framing."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from pipeline.events import Finished, Usage


@dataclass(slots=True, frozen=True)
class CompletionFormat:
    """`include_reasoning`: the model's thinking goes out as `reasoning_content` (the field vLLM and
    DeepSeek use), on the message and on stream deltas, only where the model wrote some."""

    request_id: str
    model: str
    created: int
    include_reasoning: bool = True

    @classmethod
    def start(cls, request_id: str, model: str, include_reasoning: bool = True) -> CompletionFormat:
        return cls(request_id, model, int(time.time()), include_reasoning)

    def body(self, finished: Finished) -> dict:
        message = {"role": "assistant", "content": finished.text, "refusal": None}
        if finished.reasoning and self.include_reasoning:
            message["reasoning_content"] = finished.reasoning
        return {
            "id": self.request_id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finished.finish_reason}],
            "usage": usage(finished.usage),
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

    def usage_chunk(self, counts: Usage) -> str:
        return sse({"id": self.request_id, "object": "chat.completion.chunk", "created": self.created,
                    "model": self.model, "choices": [], "usage": usage(counts)})


def usage(counts: Usage) -> dict:
    return {"prompt_tokens": counts.prompt_tokens, "completion_tokens": counts.completion_tokens,
            "total_tokens": counts.prompt_tokens + counts.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": counts.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": counts.reasoning_tokens}}


def sse(payload: dict) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def sse_comment(text: str) -> str:
    return f": {text}\n\n"


SSE_DONE = "data: [DONE]\n\n"
