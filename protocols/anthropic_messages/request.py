"""Anthropic's Messages API request (`POST /v1/messages`), as Claude Code and the `anthropic` SDKs
send it. Every field is honoured, or accepted as a documented no-op where it only steers
Anthropic's own service (prompt caching, context management, service tier, betas); anything else
is refused by name, and so are the inputs the served models cannot take (images, documents,
server tools such as web search)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from protocols.fields import unknown_field
from protocols.openai_chat.request import REQUEST_ID_PATTERN
from protocols.openai_chat.tools import NAME_PATTERN, JsonSchema

NO_OPS = ("metadata", "service_tier", "context_management", "cache_control", "inference_geo", "speed", "diagnostics")
UNSUPPORTED = {
    "container": "containers are not supported: there are no server tools here",
    "mcp_servers": "MCP servers are not supported; run the MCP client on your side and send its tools",
}
REFUSED_BLOCKS = {
    "image": "image input is not supported: the served model reads text",
    "document": "document input is not supported: send the text",
    "search_result": "search_result blocks are not supported",
    "server_tool_use": "server tools are not supported here",
    "web_search_tool_result": "server tools are not supported here",
    "container_upload": "containers are not supported",
}


MAX_STOP_SEQUENCES = 16  # Anthropic names no bound; every one is matched against each token's text


class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    cache_control: dict[str, Any] | None = None  # Anthropic's prompt caching: the engine's prefix cache does it here


class TextBlock(_Block):
    type: Literal["text"]
    text: str
    citations: list[dict[str, Any]] | None = None  # echoed nowhere: citations come only from documents


class ToolUseBlock(_Block):
    type: Literal["tool_use"]
    id: str = Field(min_length=1, max_length=256)
    name: str
    input: dict[str, Any]


class ToolResultBlock(_Block):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1, max_length=256)
    content: str | list[TextBlock] = ""
    is_error: bool | None = None

    @property
    def text(self) -> str:
        body = self.content if isinstance(self.content, str) else "".join(b.text for b in self.content)
        return f"Error: {body}" if self.is_error else body


class ThinkingBlock(_Block):
    type: Literal["thinking"]
    thinking: str
    signature: str


class RedactedThinkingBlock(_Block):
    type: Literal["redacted_thinking"]
    data: str


Block = Annotated[
    TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock, Field(discriminator="type")
]


class MessageParam(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    role: Literal["user", "assistant"]
    content: str | list[Block]

    @property
    def blocks(self) -> list[TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock]:
        return [TextBlock(type="text", text=self.content)] if isinstance(self.content, str) else list(self.content)


class Tool(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    input_schema: JsonSchema
    type: Literal["custom"] | None = None
    cache_control: dict[str, Any] | None = None
    defer_loading: bool | None = None  # Anthropic's tool search; every tool is loaded here
    strict: bool | None = None
    input_examples: list[dict[str, Any]] | None = None


class ToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class Thinking(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(default=None, ge=1)
    display: Literal["summarized", "omitted"] | None = None


class OutputFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["json_schema"]
    schema_: JsonSchema = Field(alias="schema")


class OutputConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: OutputFormat | None = None


class MessagesRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    max_tokens: int = Field(ge=1)
    messages: list[MessageParam] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    stop_sequences: list[str] | None = Field(default=None, max_length=MAX_STOP_SEQUENCES)
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    stream: bool = False
    tools: list[dict[str, Any]] | None = None  # each checked by `client_tools`: server tools are refused by name
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    # only Anthropic's own service acts on these (NO_OPS)
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    context_management: dict[str, Any] | None = None
    cache_control: dict[str, Any] | None = None
    inference_geo: str | None = None
    speed: str | None = None
    diagnostics: dict[str, Any] | None = None
    # ours, as on the other APIs
    priority: str | int | None = None
    request_id: str | None = Field(default=None, min_length=1, max_length=128, pattern=REQUEST_ID_PATTERN)

    @property
    def system_text(self) -> str:
        if isinstance(self.system, list):
            return "\n\n".join(block.text for block in self.system)
        return self.system or ""


def unknown_request_field(data: dict[str, Any]) -> tuple[str, str] | None:
    """(field, why) for the first field this server does not take, in Anthropic's wording."""
    return unknown_field(data, MessagesRequest, UNSUPPORTED, "{name}: Extra inputs are not permitted")


def refused_block(data: dict[str, Any]) -> tuple[str, str] | None:
    """(param, why) for the first content block of a kind the served models cannot take, so it is
    refused by name rather than as a shape the validator does not know."""
    for i, message in enumerate(data.get("messages") or ()):
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else ()):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind in REFUSED_BLOCKS:
                return f"messages.{i}.content.{j}", REFUSED_BLOCKS[kind]
            inner = block.get("content") if kind == "tool_result" else None
            for part in inner if isinstance(inner, list) else ():
                if isinstance(part, dict) and part.get("type") in REFUSED_BLOCKS:
                    return f"messages.{i}.content.{j}.content", REFUSED_BLOCKS[part["type"]]
    return None


def client_tools(raw: list[dict[str, Any]] | None) -> list[Tool]:
    """The client's own tools; a server tool (web search, code execution, bash, computer use...)
    is refused by its type, since nothing here would run it."""
    tools = []
    for i, tool in enumerate(raw or ()):
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise ToolRefused(
                f"tools.{i}.type",
                f"server tool {kind!r} is not supported: only client tools (name, description, input_schema) run here",
            )
        tools.append(Tool.model_validate(tool))
    return tools


class ToolRefused(ValueError):
    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param
