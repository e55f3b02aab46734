"""OpenAI's `text_completion` objects, whole and as server-sent events: the same events every
wire renders, with queue notices as SSE comments while a call waits, as in chat."""

from __future__ import annotations

import time
from dataclasses import dataclass

from core.types import TokenLogprob
from pipeline.events import Finished, Queued, ReasoningDelta, Refused, Started, TextDelta, ToolCallPiece, Usage
from protocols.openai_chat.render import SSE_DONE, dispatched_notice, error_body, queue_comment, sse, usage


@dataclass(slots=True)
class TextCompletionFormat:
    """`echo`: the prompt, put before the answer. `offset`: where the next token's text starts in
    the choice's text (logprobs' `text_offset`)."""

    request_id: str
    model: str
    created: int
    echo: str = ""
    offset: int = 0

    @classmethod
    def start(cls, request_id: str, model: str, echo: str = "") -> TextCompletionFormat:
        return cls(request_id, model, int(time.time()), echo, len(echo))

    def body(self, finished: Finished) -> dict:
        choice = self._choice(self.echo + finished.text, finished.finish_reason, finished.logprobs)
        return {**self._head(), "choices": [choice], "usage": usage(finished.usage)}

    def chunk(
        self,
        text: str,
        finish_reason: str | None = None,
        tokens: tuple[TokenLogprob, ...] | None = None,
        with_usage_field: bool = False,
    ) -> str:
        body = {**self._head(), "choices": [self._choice(text, finish_reason, tokens)]}
        return sse({**body, "usage": None} if with_usage_field else body)

    def usage_chunk(self, counts: Usage) -> str:
        return sse({**self._head(), "choices": [], "usage": usage(counts)})

    def _head(self) -> dict:
        return {"id": self.request_id, "object": "text_completion", "created": self.created, "model": self.model}

    def _choice(self, text: str, finish_reason: str | None, tokens: tuple[TokenLogprob, ...] | None) -> dict:
        return {"index": 0, "text": text, "logprobs": self._logprobs(tokens), "finish_reason": finish_reason}

    def _logprobs(self, tokens: tuple[TokenLogprob, ...] | None) -> dict | None:
        """The legacy shape: parallel lists, each alternative a {token: logprob} map."""
        if tokens is None:
            return None
        offsets = []
        for token in tokens:
            offsets.append(self.offset)
            self.offset += len(token.token)
        return {
            "tokens": [t.token for t in tokens],
            "token_logprobs": [max(t.logprob, -9999.0) for t in tokens],
            # the chosen token among them, as vLLM's server gives it (so `logprobs: 0` still shows it)
            "top_logprobs": [{s: max(p, -9999.0) for s, p in (*t.top, (t.token, t.logprob))} for t in tokens],
            "text_offset": offsets,
        }


class TextCompletionStream:
    """Queue notices as comments while it waits; the echoed prompt (if asked) once it starts; a
    chunk per piece of text; the finish, the usage if asked, `[DONE]`. A refusal after the stream
    opened is one `data:` line with the error."""

    def __init__(self, fmt: TextCompletionFormat, include_usage: bool) -> None:
        self.fmt, self.include_usage = fmt, include_usage
        self.waited = False

    async def queued(self, event: Queued) -> list[str]:
        self.waited = True
        return [queue_comment(event)]

    async def started(self, event: Started) -> list[str]:
        notice = dispatched_notice(event, self.waited)
        echo = [self.fmt.chunk(self.fmt.echo, with_usage_field=self.include_usage)] if self.fmt.echo else []
        return [*notice, *echo]

    async def reasoning(self, event: ReasoningDelta) -> list[str]:
        return []  # a text completion's answer is read as written: there is no reasoning apart from it

    async def text(self, event: TextDelta) -> list[str]:
        return [self.fmt.chunk(event.text, tokens=event.logprobs, with_usage_field=self.include_usage)]

    async def tool_call(self, event: ToolCallPiece) -> list[str]:
        return []  # nor tool calls

    async def finished(self, event: Finished) -> list[str]:
        last = self.fmt.chunk("", event.finish_reason, with_usage_field=self.include_usage)
        return [last, *([self.fmt.usage_chunk(event.usage)] if self.include_usage else []), SSE_DONE]

    async def refused(self, event: Refused) -> list[str]:
        return [sse(error_body(event.refusal))]
