"""Ollama's `/api/chat` and `/api/generate` requests as its clients send them (the `ollama` SDKs
and the apps built on them). Every field and option is honoured, a documented no-op,
or refused by name: model-loading options set on the server, not per request, are a 400."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from protocols.fields import unknown_field

Think = bool | Literal["low", "medium", "high"]
Format = Literal["", "json"] | dict[str, Any]

_SERVER_SIDE = "is how the server loads its model, set by its operator; leave it out"
UNSUPPORTED_OPTIONS = {
    **{
        name: f"options.{name} {_SERVER_SIDE}"
        for name in (
            "numa",
            "num_batch",
            "num_gpu",
            "main_gpu",
            "low_vram",
            "f16_kv",
            "logits_all",
            "vocab_only",
            "use_mmap",
            "use_mlock",
            "embedding_only",
            "num_thread",
        )
    },
    "num_keep": "options.num_keep is not supported: a prompt past the context is refused, never cut",
    "tfs_z": "options.tfs_z (tail-free sampling) is not supported by the engines",
    "typical_p": "options.typical_p is not supported by the engines",
    "repeat_last_n": "options.repeat_last_n is not supported: repeat_penalty counts the whole answer",
    "mirostat": "options.mirostat is not supported by the engines",
    "mirostat_tau": "options.mirostat_tau is not supported by the engines",
    "mirostat_eta": "options.mirostat_eta is not supported by the engines",
    "penalize_newline": "options.penalize_newline is not supported by the engines",
}
UNSUPPORTED = {
    "images": "images are not supported: the served model reads text only",
    "suffix": "suffix (fill in the middle) is not supported",
    "template": "template is not supported: the served model's own chat template lays out the prompt",
    "context": "context is not supported: send the conversation to /api/chat",
    "width": "image generation is not supported",
    "height": "image generation is not supported",
    "steps": "image generation is not supported",
}
_WORDING = "unknown field: {name}"
_CHAT_RAW = "raw is not supported on /api/chat: send a raw prompt to /api/generate"


class Options(BaseModel):
    """The sampling options the engines honour, named as Ollama names them."""

    model_config = ConfigDict(extra="forbid", strict=True)

    num_predict: int | None = Field(default=None, ge=-2)  # -1 (no limit) and -2 (fill it): to the context
    num_ctx: int | None = Field(default=None, ge=1)  # a bound on prompt plus answer (api/ollama.py)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0, le=1)
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    stop: list[str] | None = Field(default=None, max_length=4)
    repeat_penalty: float | None = Field(default=None, gt=0, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)


class CalledFunction(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(min_length=1, max_length=64)
    arguments: dict[str, Any]
    index: int | None = None  # where newer servers number a turn's calls; the order says as much


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    id: str | None = Field(default=None, min_length=1, max_length=256)
    type: Literal["function"] | None = None
    function: CalledFunction


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    thinking: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_name: str | None = Field(default=None, min_length=1, max_length=64)
    tool_call_id: str | None = Field(default=None, min_length=1, max_length=256)


class _Common(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str = Field(min_length=1)
    stream: bool = True  # Ollama streams unless told not to
    format: Format | None = None
    options: Options | None = None
    keep_alive: float | int | str | None = None  # the model stays loaded for everyone: no effect, but 0
    think: Think | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)

    @field_validator("keep_alive")
    @classmethod
    def _a_duration(cls, value: float | str | None) -> float | str | None:
        unloads(value)  # raises for what is no duration
        return value


class ShowRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    model: str | None = Field(default=None, min_length=1)
    name: str | None = Field(default=None, min_length=1)  # the older spelling
    verbose: bool = False  # everything known is shown either way


class ChatRequest(_Common):
    messages: list[Message] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None  # OpenAI's tool objects, checked as the chat API checks them


class GenerateRequest(_Common):
    prompt: str | None = None
    system: str | None = None
    raw: bool = False  # the prompt as given, no chat template: a text completion


def unknown_request_field(data: dict[str, Any], model: type[BaseModel]) -> tuple[str, str] | None:
    """(param, why) for the first field or option this server does not take. One sent empty (no
    images, `raw: false`, a null option) asks for nothing and is dropped from `data`."""
    unsupported = UNSUPPORTED if model is GenerateRequest else {**UNSUPPORTED, "raw": _CHAT_RAW}
    _drop_unset(data, unsupported)
    found = unknown_field(data, model, unsupported, _WORDING)
    if found is not None:
        return found
    messages = data.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if isinstance(message, dict) and message.get("images") in (None, []):
            message.pop("images", None)  # none, as the SDKs send it; an image is Message's 400
    options = data.get("options")
    if isinstance(options, dict):
        if options.get("mirostat") in (None, 0):  # its settings do nothing with it off
            for name in ("mirostat_tau", "mirostat_eta"):
                options.pop(name, None)
        _drop_unset(options, UNSUPPORTED_OPTIONS)
        found = unknown_field(options, Options, UNSUPPORTED_OPTIONS, "unknown option: options.{name}")
        if found is not None:
            return f"options.{found[0]}", found[1]
    return None


_NEUTRAL = {"mirostat": 0, "tfs_z": 1.0, "typical_p": 1.0}  # values that turn an option off, as Ollama's defaults do


def _drop_unset(data: dict[str, Any], unsupported: dict[str, str]) -> None:
    for name in [n for n, value in data.items() if n in unsupported and _unset(n, value)]:
        del data[name]


_DURATION = re.compile(r"-?(\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def unloads(keep_alive: float | str | None) -> bool:
    """Whether `keep_alive` asks to unload the model now: zero, in seconds or as a Go duration
    ("0s", "0h", "-0m"). A negative one keeps it loaded for ever, as it stays anyway."""
    if keep_alive is None or isinstance(keep_alive, (int, float)):
        return keep_alive == 0
    text = keep_alive.strip()
    if re.fullmatch(r"-?\d+(\.\d*)?", text):
        return float(text) == 0
    parts = list(_DURATION.finditer(text))
    if not text or "".join(p.group(0) for p in parts) != text:
        raise ValueError(f"keep_alive: {keep_alive[:40]!r} is not a duration such as 5m or 1h30m")
    return all(float(p.group(1)) == 0 for p in parts)


def _unset(name: str, value: Any) -> bool:
    """Sent empty (no images, `raw: false`), null, or at a value that turns it off."""
    if name in _NEUTRAL:
        return value is None or value == _NEUTRAL[name]
    return value is None or value is False or value == "" or value == []
