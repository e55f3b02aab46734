"""The chat completion request as OpenAI defines it, plus our `priority` and `request_id`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.types import ChatMessage

REQUEST_ID_PATTERN = r"^[A-Za-z0-9._:\-]{1,128}$"


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    role: Literal["system", "developer", "user", "assistant"]
    content: str | Annotated[list[TextPart], Field(min_length=1)]
    name: str | None = None

    @field_validator("content")
    @classmethod
    def _encodable(cls, content: str | list[TextPart]) -> str | list[TextPart]:
        """JSON may escape a lone surrogate (\\ud800); no tokenizer can encode it."""
        texts = [content] if isinstance(content, str) else [p.text for p in content]
        for text in texts:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("text must be valid Unicode, without lone surrogates") from None
        return content

    def to_chat(self) -> ChatMessage:
        text = self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)
        return ChatMessage("system" if self.role == "developer" else self.role, text)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

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
    user: str | None = None
    n: int | None = None
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    cache: bool | None = None
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
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class TokenizeRequest(BaseModel):
    """vLLM's chat form of `POST /tokenize`: the messages as the chat template lays them out,
    generation prompt included, so the count is what a completion's prompt would take."""

    model_config = ConfigDict(extra="ignore", strict=True)

    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    reasoning_effort: Literal["low", "medium", "high"] | None = None


def describe(error: ValidationError) -> tuple[str, str]:
    """(param, message) for the first problem, naming the parameter as OpenAI does."""
    first = max(error.errors(), key=lambda e: len(e["loc"]))
    loc = [str(p) for p in first["loc"] if not (isinstance(p, str) and p in _UNION_TAGS)]
    param = ".".join(loc) or "body"
    if first["type"] == "missing":
        return param, f"missing required parameter: {param!r}"
    got = first.get("input")
    shown = repr(got) if isinstance(got, (str, int, float, bool)) or got is None else type(got).__name__
    return param, f"invalid value for {param!r}: {_lower_first(first['msg'])} (got {shown})"


def _lower_first(text: str) -> str:
    """Lower only the first letter: a pattern or a class name in the message keeps its case."""
    return text[:1].lower() + text[1:]


_UNION_TAGS = {"str", "int", "list[str]", "list[TextPart]", "TextPart", "bool", "float", "none"}
