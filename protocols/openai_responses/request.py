"""The Responses API request (`POST /v1/responses`) as OpenAI defines it: what this server honours,
what it accepts as bookkeeping, and what it refuses by name. Input items are checked one by one,
so an error names the item (`input.2.call_id`)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from protocols.fields import unknown_field
from protocols.openai_chat.request import describe
from protocols.openai_chat.tools import NAME_PATTERN, JsonSchema, JsonSchemaFormat

HOSTED_TOOLS = {
    "web_search",
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "file_search",
    "code_interpreter",
    "image_generation",
    "computer_use",
    "computer_use_preview",
    "mcp",
    "namespace",
    "local_shell",
    "shell",
    "apply_patch",
    "tool_search",
}
SUPPORTED_INCLUDE = {"reasoning.encrypted_content"}
UNSUPPORTED = {
    "conversation": "conversations are not supported; continue with previous_response_id",
    "prompt": "prompt templates are not supported; send input and instructions",
    "max_tool_calls": "max_tool_calls is not supported",
    "top_logprobs": "top_logprobs is not supported on /v1/responses; use /v1/chat/completions",
    "stream_options": "stream_options is not supported on /v1/responses",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TextContent(_Strict):
    type: Literal["input_text", "output_text", "text", "reasoning_text", "summary_text"]
    text: str
    annotations: list | None = None  # what an echoed output_text carries: no effect
    logprobs: list | None = None


def joined(value: str | list[TextContent]) -> str:
    return value if isinstance(value, str) else "".join(p.text for p in value)


class MessageItem(_Strict):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[TextContent]
    id: str | None = None
    status: str | None = None

    @property
    def text(self) -> str:
        return joined(self.content)


class FunctionCallItem(_Strict):
    type: Literal["function_call"]
    call_id: str = Field(min_length=1, max_length=256)
    name: str = Field(min_length=1, max_length=64)
    namespace: str | None = Field(default=None, min_length=1, max_length=64)  # a tool of a `namespace` group
    arguments: str
    id: str | None = None
    status: str | None = None


class _CallOutput(_Strict):
    call_id: str = Field(min_length=1, max_length=256)
    output: str | list[TextContent]
    id: str | None = None
    status: str | None = None

    @property
    def text(self) -> str:
        return joined(self.output)


class FunctionCallOutputItem(_CallOutput):
    """Either the answer to a call (`call_id`), or a function's output the client adds on its own,
    named instead (Codex sends its goal as `name: goal_objective, namespace: agent`)."""

    type: Literal["function_call_output"]
    call_id: str | None = Field(default=None, min_length=1, max_length=256)  # type: ignore[assignment]
    name: str | None = Field(default=None, min_length=1, max_length=64)
    namespace: str | None = Field(default=None, min_length=1, max_length=64)


class ReasoningItem(_Strict):
    type: Literal["reasoning"]
    id: str | None = None
    summary: list[TextContent] = Field(default_factory=list)
    content: list[TextContent] | None = None
    encrypted_content: str | None = None
    status: str | None = None

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.content or self.summary)


class CustomCallItem(_Strict):
    type: Literal["custom_tool_call"]
    call_id: str = Field(min_length=1, max_length=256)
    name: str = Field(min_length=1, max_length=64)
    input: str
    id: str | None = None
    status: str | None = None


class CustomCallOutputItem(_CallOutput):
    type: Literal["custom_tool_call_output"]


Item = MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem | CustomCallItem | CustomCallOutputItem
ITEMS: dict[str, type[Item]] = {
    "message": MessageItem,
    "function_call": FunctionCallItem,
    "function_call_output": FunctionCallOutputItem,
    "reasoning": ReasoningItem,
    "custom_tool_call": CustomCallItem,
    "custom_tool_call_output": CustomCallOutputItem,
}


class FunctionTool(_Strict):
    type: Literal["function"]
    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    parameters: JsonSchema = None
    strict: bool | None = None


class TextOnly(_Strict):
    type: Literal["text"]


class CustomTool(_Strict):
    """A free-form tool: the model writes its input as plain text (asked of the engine as one
    string argument, `input`). Grammar formats are not honoured, so they are refused."""

    type: Literal["custom"]
    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    format: TextOnly | None = None

    def as_function(self) -> FunctionTool:
        return FunctionTool(
            type="function",
            name=self.name,
            description=self.description,
            strict=True,
            parameters={
                "type": "object",
                "properties": {"input": {"type": "string"}},
                "required": ["input"],
                "additionalProperties": False,
            },
        )


class NamedFunction(_Strict):
    type: Literal["function"]
    name: str


class Reasoning(_Strict):
    effort: Literal["low", "medium", "high"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None  # the analysis is shown whole, not summarised
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class TextFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(default=None, pattern=NAME_PATTERN)
    description: str | None = None
    schema_: JsonSchema = Field(default=None, alias="schema")
    strict: bool | None = None


class TextOptions(_Strict):
    format: TextFormat | None = None
    verbosity: Literal["medium"] | None = None  # the only verbosity the served models write


class ResponsesRequest(_Strict):
    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedFunction | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    reasoning: Reasoning | None = None
    text: TextOptions | None = None
    store: bool = True
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=128)
    include: list[str] | None = None
    stream: bool = False
    background: bool = False
    truncation: Literal["disabled", "auto"] | None = None
    # bookkeeping that cannot change the answer
    metadata: dict[str, str] | None = None
    user: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    client_metadata: dict[str, Any] | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None
    # ours
    priority: str | int | None = None


class ResponsesInputError(ValueError):
    def __init__(self, param: str, message: str, code: str = "invalid_value") -> None:
        super().__init__(message)
        self.param, self.code = param, code


def unknown_request_field(data: dict[str, Any]) -> tuple[str, str] | None:
    return unknown_field(data, ResponsesRequest, UNSUPPORTED)


def input_items(body: ResponsesRequest) -> list[Item]:
    """The input as items: a string is one user message."""
    if isinstance(body.input, str):
        return [MessageItem(role="user", content=body.input)]
    return [parse_item(raw, f"input.{i}") for i, raw in enumerate(body.input)]


def parse_item(raw: dict[str, Any], where: str) -> Item:
    kind = raw.get("type", "message")
    model = ITEMS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ResponsesInputError(
            f"{where}.type",
            f"input items of type {kind!r} are not supported; send {', '.join(ITEMS)}",
            "unsupported_parameter",
        )
    try:
        item = model.model_validate(raw)
    except ValidationError as exc:
        param, message = describe(exc)
        raise ResponsesInputError(f"{where}.{param}", message.replace(repr(param), repr(f"{where}.{param}"))) from None
    if isinstance(item, FunctionCallOutputItem) and item.call_id is None and item.name is None:
        raise ResponsesInputError(
            f"{where}.call_id",
            f"missing required parameter: '{where}.call_id' (or the "
            f"function's name, for an output that answers no call)",
        )
    return item


def split_tools(body: ResponsesRequest) -> tuple[list[FunctionTool], list[CustomTool], list[str]]:
    """The function and custom tools the model is shown, and the hosted kinds it is not (named back
    to the client in a header: clients such as Codex always send some)."""
    functions: list[FunctionTool] = []
    custom: list[CustomTool] = []
    hosted: list[str] = []
    for i, raw in enumerate(body.tools or ()):
        kind = raw.get("type")
        if kind in HOSTED_TOOLS:
            hosted.append(_hosted_name(raw.get("name"), kind))
            continue
        if kind not in ("function", "custom"):
            raise ResponsesInputError(
                f"tools.{i}.type",
                f"tools of type {kind!r} are not supported; send function or custom tools",
                "unsupported_parameter",
            )
        try:
            if kind == "function":
                functions.append(FunctionTool.model_validate(raw))
            else:
                custom.append(CustomTool.model_validate(raw))
        except ValidationError as exc:
            param, message = describe(exc)
            raise ResponsesInputError(f"tools.{i}.{param}", message) from None
    return functions, custom, list(dict.fromkeys(hosted))[:_HOSTED_NAMED]


def check_include(body: ResponsesRequest) -> None:
    for i, name in enumerate(body.include or ()):
        if name not in SUPPORTED_INCLUDE:
            raise ResponsesInputError(f"include.{i}", f"include {name!r} is not supported", "unsupported_parameter")


def json_schema_format(fmt: TextFormat) -> JsonSchemaFormat:
    return JsonSchemaFormat(
        name=fmt.name or "response", description=fmt.description, schema=fmt.schema_, strict=fmt.strict
    )


_HOSTED_NAMED = 16  # named back at most: a body of a thousand hosted tools is no header a proxy passes


def _hosted_name(name: object, kind: str) -> str:
    """A hosted tool's own name where it is a plain tool name, else its type: it goes into a
    response header and the log, where a client's newline or non-Latin-1 text would be a 500."""
    return name if isinstance(name, str) and re.fullmatch(NAME_PATTERN, name) else kind
