"""The chat completion request as OpenAI defines it, plus the sampling extensions vLLM's server
takes and our `priority`, `cache` and `request_id`. Every field is honoured or a documented no-op;
any other field is refused by name (`unknown_fields`)."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.types import Structured, ToolUse
from protocols.fields import unknown_field
from protocols.openai_chat.messages import Message, TextPart, ToolCallIn
from protocols.openai_chat.tools import ResponseFormat, ToolChoice, ToolDef, structured, tool_use

REQUEST_ID_PATTERN = r"^[A-Za-z0-9._:\-]{1,128}$"

UNSUPPORTED = {
    "audio": "audio output is not supported: the served models write text",
    "prediction": "predicted outputs are not supported",
    "web_search_options": "web search is not supported",
    "functions": "the deprecated 'functions' is not supported; send 'tools'",
    "function_call": "the deprecated 'function_call' is not supported; send 'tool_choice'",
    "verbosity": "verbosity is not supported by the served models",
    "prompt_cache_retention": "prompt_cache_retention is not supported; the engine's prefix cache keeps what fits",
}
NO_OPS = ("metadata", "store", "prompt_cache_key", "safety_identifier", "service_tier", "user")


_NOT_IN_OPTIONS = {
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "stop",
    "seed",
    "reasoning_effort",
    "stream",
    "stream_options",
    "cache",
    "include_reasoning",
    "priority",
    "request_id",
    *NO_OPS,
}  # in the cache key on their own, or unable to change the answer


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    include_usage: bool = False
    include_obfuscation: bool | None = None  # no effect: there is no third party on the stream to pad against


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    messages: list[Message] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)  # a 64-bit integer, as the engines take
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int | None = None
    modalities: list[Literal["text"]] | None = None
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    tools: list[ToolDef] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    # vLLM's sampling extensions, as its server takes them (here after the chat's own fields, so a
    # body with several problems is told about those first)
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0, le=1)
    repetition_penalty: float | None = Field(default=None, gt=0, le=2)
    min_tokens: int | None = Field(default=None, ge=0)
    ignore_eos: bool | None = None
    stop_token_ids: list[int] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    # bookkeeping that cannot change the answer (NO_OPS)
    metadata: dict[str, str] | None = None
    store: bool | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None
    user: str | None = None
    # ours
    cache: bool | Literal["exact"] | None = None  # false: bypass; "exact": no similar-question answers
    include_reasoning: bool = True
    priority: str | int | None = None
    request_id: str | None = Field(default=None, min_length=1, max_length=128, pattern=REQUEST_ID_PATTERN)

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def stop_list(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    @property
    def prompt_text(self) -> None:
        return None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def logprobs_count(self) -> int | None:
        """Alternatives per token the engine returns; None without `logprobs: true`."""
        return (self.top_logprobs or 0) if self.logprobs else None

    @property
    def max_tokens_param(self) -> str:
        """The parameter a too-long request is blamed on: the one the client sent, else the messages."""
        if self.requested_max_tokens is None:
            return "messages"
        return "max_completion_tokens" if self.max_completion_tokens is not None else "max_tokens"

    @property
    def uses_tools(self) -> bool:
        return bool(self.tools) or any(m.role == "tool" or m.tool_calls for m in self.messages)

    def tool_use(self) -> ToolUse | None:
        return tool_use(self.tools, self.tool_choice, self.parallel_tool_calls)

    def structured_output(self) -> Structured | None:
        return structured(self.response_format)

    def cache_options(self) -> str:
        """Everything else the body sets that can change the answer, canonically; "" for none, so
        a plain request keeps the cache key it always had."""
        rest = self.model_dump(mode="json", exclude=_NOT_IN_OPTIONS, exclude_none=True, by_alias=True)
        return json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=False) if rest else ""


# Arguments of the template call itself, not variables of the template: `chat_template` would run
# a caller's own Jinja (a loop of a few million steps holds every prompt behind it), the others
# clash with the call's own arguments.
RESERVED_TEMPLATE_KWARGS = frozenset(
    {
        "chat_template",
        "tokenize",
        "add_generation_prompt",
        "continue_final_message",
        "tools",
        "documents",
        "conversation",
        "messages",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)


def template_kwargs_problem(kwargs: dict[str, Any] | None) -> str | None:
    """The first key of `chat_template_kwargs` this server refuses, named as a param."""
    for key in kwargs or ():
        if key in RESERVED_TEMPLATE_KWARGS:
            return f"chat_template_kwargs.{key}"
    return None


def unknown_fields(data: dict[str, Any]) -> tuple[str, str] | None:
    """(field, why) for the first field of a request body this server does not take."""
    return unknown_field(data, ChatCompletionRequest, UNSUPPORTED)


class TokenizeRequest(BaseModel):
    """vLLM's chat form of `POST /tokenize`: the messages as the chat template lays them out,
    generation prompt included, so the count is what a completion's prompt would take. Another of
    vLLM's fields is a 400 naming it: a count that silently left it out would be a wrong count."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    tools: list[ToolDef] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: Literal[True] = True  # what a gateway of ours sends; always so here
    # vLLM's others, at their defaults (what a client of vLLM sends unasked); any other value is a 400
    add_special_tokens: Literal[False] = False
    continue_final_message: Literal[False] = False
    return_token_strs: Literal[False] = False


class TokenizeTextRequest(BaseModel):
    """vLLM's completion form of `POST /tokenize`: a text completion's prompt, as it is tokenized."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = None
    prompt: str = Field(min_length=1)
    add_special_tokens: Literal[True] = True  # vLLM's default for this form
    return_token_strs: Literal[False] = False


def describe(error: ValidationError) -> tuple[str, str]:
    """(param, message) for the first problem, naming the parameter as OpenAI does."""
    first = max(error.errors(), key=lambda e: len(e["loc"]))
    loc = [str(p) for p in first["loc"] if not (isinstance(p, str) and p in _UNION_TAGS)]
    param = ".".join(loc) or "body"
    if first["type"] == "missing":
        return param, f"missing required parameter: {param!r}"
    if first["type"] == "extra_forbidden":
        return param, f"unrecognized request argument supplied: {param}"
    got = first.get("input")
    shown = repr(got) if isinstance(got, (str, int, float, bool)) or got is None else type(got).__name__
    return param, f"invalid value for {param!r}: {_lower_first(first['msg'])} (got {shown})"


def _lower_first(text: str) -> str:
    """Lower only the first letter: a pattern or a class name in the message keeps its case."""
    return text[:1].lower() + text[1:]


_UNION_TAGS = {
    "str",
    "int",
    "list[str]",
    "literal['exact']",
    "list[TextPart]",
    "TextPart",
    "bool",
    "float",
    "none",
    "NamedToolChoice",
    "literal['none','auto','required']",
    "literal['','json']",  # Ollama's `format` and `think`
    "dict[str,any]",
    "literal['low','medium','high']",
}
__all__ = [
    "ChatCompletionRequest",
    "Message",
    "TextPart",
    "ToolCallIn",
    "TokenizeRequest",
    "TokenizeTextRequest",
    "describe",
    "unknown_fields",
    "REQUEST_ID_PATTERN",
]
