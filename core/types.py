"""A chat, how to sample its answer, and the answer as it streams: shared by the engines, the
scheduler and the pipeline, owned by none of them."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]
FinishReason = Literal["stop", "length", "abort"]
ToolFormat = Literal["harmony", "hermes", "native"]  # how a model writes calls; native: an upstream parses them


@dataclass(slots=True, frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI sends it


@dataclass(slots=True, frozen=True)
class ChatMessage:
    """`tool_calls` and `reasoning` on assistant turns; `tool_call_id` on tool results."""

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: str = ""


@dataclass(slots=True, frozen=True)
class Tool:
    """A function the model may call; `parameters` is a JSON Schema."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool = False


@dataclass(slots=True, frozen=True)
class ToolUse:
    """Calls to read from the output. `choice`: "auto", "required" or a function's name."""

    tools: tuple[Tool, ...]
    choice: str = "auto"
    parallel: bool = True


@dataclass(slots=True, frozen=True)
class Structured:
    """A constraint on the answer: `schema` for json_schema, None for any JSON object."""

    schema: dict[str, Any] | None = None


@dataclass(slots=True)
class GenParams:
    max_tokens: int
    temperature: float | None = None  # None: the engine's own default (llama.cpp's server: 0.8; vLLM: 1.0)
    top_p: float | None = None  # ...(llama.cpp's server: 0.95; vLLM: 1.0)
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    priority: int = 0  # lower runs first, as in vLLM
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    top_k: int | None = None  # None: the engine's own default; 0: off
    min_p: float | None = None
    min_tokens: int = 0
    ignore_eos: bool = False
    logit_bias: dict[int, float] | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    logprobs: int | None = None  # alternatives per token to return; None: no logprobs
    structured: Structured | None = None
    tools: ToolUse | None = None
    raw: bool = False  # a text completion: the model's text as written, nothing read out of it (channels, calls)


@dataclass(slots=True)
class Prompt:
    """A chat rendered by the engine, or a text completion's prompt as given: exact token count plus
    whatever the engine needs later."""

    num_tokens: int
    payload: Any = None


@dataclass(slots=True, frozen=True)
class ToolCallDelta:
    """A piece of a call: the first carries `id` and `name`, later ones argument text."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(slots=True, frozen=True)
class TokenLogprob:
    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()  # the most likely tokens at this step, best first


@dataclass(slots=True)
class Delta:
    """One step of output: `text` is the answer; `finish_reason` is set on the last delta only.
    `tool_call_errors`: output that looked like a call and did not parse (it came back as text).
    `stop_sequence`, on the last delta: the stop string that ended the output, where the engine
    says (None: end of sequence, a stop token, the length, or an engine that does not say)."""

    text: str
    num_tokens: int
    finish_reason: FinishReason | None = None
    cached_tokens: int = 0
    reasoning: str = ""  # thinking, from models that write it on its own channel (gpt-oss)
    reasoning_tokens: int = 0
    tool_calls: tuple[ToolCallDelta, ...] = ()
    tool_call_errors: int = 0
    logprobs: tuple[TokenLogprob, ...] = ()
    stop_sequence: str | None = None


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)
