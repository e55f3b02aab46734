"""OpenAI's legacy text completion request (`POST /v1/completions`), with the sampling extensions
vLLM's server takes and our `priority`, `cache` and `request_id`: the prompt is continued as given,
no chat template. Any other field is refused by name (`unknown_fields`), and so is a value we
cannot honour (`problem`): several prompts, token-id prompts, `suffix`, `best_of`, `n` over 1."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.types import ChatMessage, Structured, ToolUse
from protocols.fields import unknown_field
from protocols.openai_chat.request import REQUEST_ID_PATTERN, StreamOptions

DEFAULT_MAX_TOKENS = 16  # OpenAI's and vLLM's default for this endpoint (set by its route, not by Ollama's raw)

# in the cache key on their own, or unable to change the answer (`echo` is added when rendering;
# `logprobs` bypasses the cache)
_NOT_IN_OPTIONS = {"model", "prompt", "max_tokens", "temperature", "top_p", "stop", "seed", "stream", "stream_options"}
_NOT_IN_OPTIONS |= {"cache", "priority", "request_id", "user", "echo", "logprobs"}


@dataclass(slots=True, frozen=True)
class PromptTurn:
    """The prompt as the one turn the cache keys a call by (its namespace keeps it apart from chats)."""

    text: str

    def to_chat(self) -> ChatMessage:
        return ChatMessage("user", self.text)


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    prompt: str | list[str] | list[int] | list[list[int]]
    suffix: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    n: int | None = None
    best_of: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: int | None = Field(default=None, ge=0, le=20)
    echo: bool = False
    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    user: str | None = None  # bookkeeping: cannot change the answer
    # vLLM's sampling extensions, as its server takes them
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0, le=1)
    repetition_penalty: float | None = Field(default=None, gt=0, le=2)
    min_tokens: int | None = Field(default=None, ge=0)
    ignore_eos: bool | None = None
    stop_token_ids: list[int] | None = None
    # ours
    cache: bool | Literal["exact"] | None = None
    priority: str | int | None = None
    request_id: str | None = Field(default=None, min_length=1, max_length=128, pattern=REQUEST_ID_PATTERN)

    @model_validator(mode="after")
    def _exact_hits_only(self) -> CompletionRequest:
        """A prompt a little different is continued differently: never another prompt's answer."""
        if self.cache is not False:
            self.cache = "exact"
        return self

    def problem(self) -> tuple[str, str, str] | None:
        """(param, code, why) for a valid value this server cannot honour."""
        unsupported, invalid = "unsupported_parameter", "invalid_value"
        if isinstance(self.prompt, list) and not all(isinstance(p, str) for p in self.prompt):
            return "prompt", unsupported, "token-id prompts are not supported; send the prompt as text"
        if isinstance(self.prompt, list) and len(self.prompt) > 1:
            return "prompt", unsupported, f"one prompt per request is supported; got {len(self.prompt)}"
        if not self.prompt_text:
            return "prompt", invalid, "the prompt is empty"
        if self.suffix:
            return "suffix", unsupported, "suffix (fill in the middle) is not supported"
        if self.n not in (None, 1):
            return "n", unsupported, f"only n=1 is supported; got n={self.n}"
        if self.best_of not in (None, 1):
            return "best_of", unsupported, f"only best_of=1 is supported; got best_of={self.best_of}"
        if self.echo and self.logprobs is not None:
            return "echo", unsupported, "echo with logprobs is not supported: the engine gives no prompt logprobs"
        if len(self.stop_list) > 4:
            return "stop", invalid, "stop takes at most 4 sequences"
        if self.min_tokens and self.max_tokens is not None and self.min_tokens > self.max_tokens:
            return (
                "min_tokens",
                invalid,
                f"min_tokens ({self.min_tokens}) is more than max_tokens ({self.max_tokens})",
            )
        return None

    @property
    def prompt_text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else str(self.prompt[0]) if self.prompt else ""

    @property
    def messages(self) -> tuple[PromptTurn, ...]:
        return (PromptTurn(self.prompt_text),)

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    @property
    def max_tokens_param(self) -> str:
        return "max_tokens"

    @property
    def stop_list(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def logprobs_count(self) -> int | None:
        return self.logprobs

    # what a chat has and a text completion has not
    @property
    def reasoning_effort(self) -> None:
        return None

    @property
    def chat_template_kwargs(self) -> None:
        return None

    @property
    def parallel_tool_calls(self) -> None:
        return None

    @property
    def uses_tools(self) -> bool:
        return False

    def tool_use(self) -> ToolUse | None:
        return None

    def structured_output(self) -> Structured | None:
        return None

    def cache_options(self) -> str:
        """The other fields that can change the answer, canonically; "" for none."""
        rest = self.model_dump(mode="json", exclude=_NOT_IN_OPTIONS, exclude_none=True)
        return json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=False) if rest else ""


def unknown_fields(data: dict[str, Any]) -> tuple[str, str] | None:
    return unknown_field(data, CompletionRequest, {})
