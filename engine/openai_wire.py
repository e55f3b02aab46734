"""Our parameters as OpenAI's chat API (and vLLM's extensions) take them, and the pieces of a
streamed answer back: for the servers behind a gateway."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from core.types import Delta, FinishReason, GenParams, TokenLogprob, ToolCallDelta
from engine.base import EngineError

_FINISH: dict[str, FinishReason] = {"stop": "stop", "length": "length", "abort": "abort"}


def sampling_fields(params: GenParams) -> dict[str, Any]:
    """What differs from the defaults, under the names vLLM's server takes."""
    given = {
        "presence_penalty": params.presence_penalty,
        "frequency_penalty": params.frequency_penalty,
        "repetition_penalty": params.repetition_penalty if params.repetition_penalty != 1.0 else None,
        "top_k": params.top_k,
        "min_p": params.min_p,
        "min_tokens": params.min_tokens,
        "ignore_eos": params.ignore_eos,
        "stop_token_ids": params.stop_token_ids,
        "logit_bias": {str(k): v for k, v in (params.logit_bias or {}).items()},
    }
    out: dict[str, Any] = {k: v for k, v in given.items() if v}
    if params.logprobs is not None:
        out.update(logprobs=True, top_logprobs=params.logprobs)
    if params.structured is not None:
        schema = params.structured.schema
        out["response_format"] = (
            {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
            if schema
            else {"type": "json_object"}
        )
    return out


def text_completion_body(model: str, prompt: str, params: GenParams, send_priority: bool) -> dict[str, Any]:
    """A streamed `/v1/completions` request: its `logprobs` is a count, not a flag."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": params.max_tokens,
        **{k: v for k in ("temperature", "top_p", "seed") if (v := getattr(params, k)) is not None},
        **({"stop": params.stop} if params.stop else {}),
        **({"priority": params.priority} if send_priority else {}),
        **sampling_fields(params),
    }
    if params.logprobs is not None:
        del body["top_logprobs"]
        body["logprobs"] = params.logprobs
    return body


def tool_fields(payload: dict[str, Any], params: GenParams) -> dict[str, Any]:
    """The tools (rendered by prepare), the choice and the template's arguments."""
    kwargs = payload.get("chat_template_kwargs")
    out: dict[str, Any] = {"chat_template_kwargs": kwargs} if kwargs else {}
    use = params.tools
    if use is None:
        return out
    names = {t.name for t in use.tools}
    choice = {"type": "function", "function": {"name": use.choice}} if use.choice in names else use.choice
    return {**out, "tools": payload["tools"], "tool_choice": choice, "parallel_tool_calls": use.parallel}


def call_delta(call: dict[str, Any]) -> ToolCallDelta:
    function = call.get("function") or {}
    return ToolCallDelta(
        int(call.get("index", 0)), call.get("id"), function.get("name"), function.get("arguments") or ""
    )


def logprobs_of(given: dict[str, Any] | None) -> tuple[TokenLogprob, ...]:
    """Chat's `{"content": [...]}`, or a text completion's parallel lists (vLLM's, OpenAI's legacy)."""
    if given and "tokens" in given:
        return _text_logprobs(given)
    entries = (given or {}).get("content") or ()
    return tuple(
        TokenLogprob(e["token"], e["logprob"], tuple((t["token"], t["logprob"]) for t in e.get("top_logprobs") or ()))
        for e in entries
    )


def _text_logprobs(given: dict[str, Any]) -> tuple[TokenLogprob, ...]:
    tops = given.get("top_logprobs") or [None] * len(given["tokens"])
    return tuple(
        TokenLogprob(token, logprob if logprob is not None else -9999.0, _ranked(top))
        for token, logprob, top in zip(given["tokens"], given.get("token_logprobs") or (), tops)
    )


def _ranked(top: dict[str, float] | None) -> tuple[tuple[str, float], ...]:
    return tuple(sorted((top or {}).items(), key=lambda item: -item[1]))


class ChunkReader:
    """A stream of chat.completion.chunk (or text_completion) objects as deltas: one token per
    content chunk (vLLM and llama.cpp send one per step), corrected by the usage chunk at the end;
    or as many as the chunk's running count says where it has one (llama.cpp's `timings_per_token`:
    it holds back a character's first bytes, so a Japanese answer came two tokens a chunk, and a
    chat suspended mid-answer resumed with half its tokens uncounted, past its `max_tokens`).
    The stop string that ended it is vLLM's `stop_reason` or SGLang's `matched_stop` where a
    string; llama.cpp's OpenAI endpoints do not name it (and drop it from the text)."""

    def __init__(self) -> None:
        self.counted = 0
        self.finish: str | None = None
        self.stop: str | None = None
        self.done = False

    def feed(self, chunk: dict[str, Any]) -> list[Delta]:
        out = []
        made = (chunk.get("timings") or {}).get("predicted_n")
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            text = delta.get("content") or choice.get("text") or ""
            reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
            calls = tuple(call_delta(c) for c in delta.get("tool_calls") or ())
            self.finish = choice.get("finish_reason") or self.finish
            self.stop = matched_stop(choice) or self.stop
            if text or reasoning or calls:
                tokens = max(1, made - self.counted) if isinstance(made, int) else 1
                self.counted += tokens
                out.append(
                    Delta(
                        text,
                        tokens,
                        reasoning=reasoning,
                        reasoning_tokens=tokens if reasoning and not text else 0,
                        tool_calls=calls,
                        logprobs=logprobs_of(choice.get("logprobs")),
                    )
                )
        if usage := chunk.get("usage"):
            extra = max(0, usage.get("completion_tokens", self.counted) - self.counted)
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
            out.append(self.last(extra, cached))
            self.done = True
        return out

    def finish_reason(self) -> FinishReason:
        return _FINISH.get(self.finish or "stop", "stop")

    def last(self, tokens: int = 0, cached: int = 0) -> Delta:
        """The closing delta: the finish, and the stop string when the finish is a stop."""
        finish = self.finish_reason()
        return Delta("", tokens, finish, cached_tokens=cached, stop_sequence=self.stop if finish == "stop" else None)


def matched_stop(choice: dict[str, Any]) -> str | None:
    """vLLM's `stop_reason`, SGLang's `matched_stop`: the stop string, or a token id (not ours)."""
    found = choice.get("stop_reason") or choice.get("matched_stop")
    return found if isinstance(found, str) and found else None


async def sse_deltas(lines: AsyncIterator[str]) -> AsyncIterator[Delta]:
    """The `data:` lines of an OpenAI stream as deltas; an error chunk raises."""
    reader = ChunkReader()
    async for line in lines:
        for delta in _line_deltas(reader, line):
            yield delta
        if reader.done:
            return
    yield reader.last()


async def sse_body_deltas(body: AsyncIterator[bytes]) -> AsyncIterator[Delta]:
    """The same from the body's bytes as they arrive, split into lines here: one read holds one
    event while the reader keeps up, several when it fell behind."""
    reader, rest = ChunkReader(), b""
    async for data in body:
        *lines, rest = (rest + data).split(b"\n")
        for line in lines:
            for delta in _line_deltas(reader, line):
                yield delta
            if reader.done:
                return
    yield reader.last()


def _line_deltas(reader: ChunkReader, line: str | bytes) -> list[Delta]:
    """Only a `data:` line carries a chunk, and `[DONE]` none."""
    if line[:6] not in ("data: ", b"data: ") or line[6:12] in ("[DONE]", b"[DONE]"):
        return []
    return reader.feed(_chunk(line[6:]))


def _chunk(data: str | bytes) -> dict[str, Any]:
    chunk = json.loads(data)
    if "error" in chunk:
        raise EngineError(str(chunk["error"].get("message", chunk["error"])))
    return chunk
