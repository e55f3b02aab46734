"""Chat messages as OpenAI's API sends them, tool turns included, checked and turned into the
engines' `ChatMessage`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from core.types import ChatMessage, ToolCall


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["text"]
    text: str


class CalledFunction(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(min_length=1, max_length=64)
    arguments: str


class ToolCallIn(BaseModel):
    """A call an earlier assistant turn made, sent back with the conversation."""

    model_config = ConfigDict(extra="forbid", strict=True)
    id: str = Field(min_length=1, max_length=256)
    type: Literal["function"] = "function"
    function: CalledFunction


Content = str | Annotated[list[TextPart], Field(min_length=1)]


class Message(BaseModel):
    """`reasoning_content` (and vLLM's newer `reasoning`) on an assistant turn go back to models
    that read them: gpt-oss needs the reasoning of a turn that called a tool."""

    model_config = ConfigDict(extra="forbid", strict=True)
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Content | None = Field(default=None, validate_default=True)
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = Field(default=None, min_length=1, max_length=256)
    reasoning_content: str | None = None
    reasoning: str | None = None
    # what a past answer carried, sent back with it by clients that echo the message: no effect
    refusal: str | None = None
    annotations: list | None = None
    audio: dict | None = None
    function_call: dict | None = None

    @field_validator("content")
    @classmethod
    def _encodable(cls, content: Content | None, info: ValidationInfo) -> Content | None:
        """JSON may escape a lone surrogate (\\ud800); no tokenizer can encode it. Only an
        assistant turn that calls tools may come without content."""
        if content is None and info.data.get("role") not in ("assistant", None):
            raise ValueError(f"a {info.data['role']} message needs content")
        texts = [] if content is None else [content] if isinstance(content, str) else [p.text for p in content]
        for text in texts:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("text must be valid Unicode, without lone surrogates") from None
        return content

    @model_validator(mode="after")
    def _complete(self) -> Message:
        if self.role == "assistant" and self.content is None and not self.tool_calls:
            raise ValueError("an assistant message needs content or tool_calls")
        if self.role == "tool" and self.tool_call_id is None:
            raise ValueError("a tool message needs tool_call_id: the id of the call it answers")
        return self

    @property
    def text(self) -> str:
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)

    def to_chat(self) -> ChatMessage:
        role = "system" if self.role == "developer" else self.role
        calls = tuple(ToolCall(c.id, c.function.name, c.function.arguments) for c in self.tool_calls or ())
        return ChatMessage(
            role, self.text, calls, self.tool_call_id, self.name, self.reasoning_content or self.reasoning or ""
        )
