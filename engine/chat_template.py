"""A chat as a Hugging Face chat template takes it, tools and tool turns included, and which
template a model's tools go through: its own, or ours for ChatML models whose own has none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.types import ChatMessage, Tool, ToolFormat

CHATML_TOOLS = (Path(__file__).parent / "templates" / "chatml_tools.jinja").read_text()


def tool_format(template: str, harmony: bool) -> ToolFormat | None:
    """harmony for gpt-oss; hermes where the template writes `<tool_call>` or is ChatML (ours
    then); None: no known way to give this model tools."""
    if harmony:
        return "harmony"
    if "<tool_call>" in template or "<|im_start|>" in template:
        return "hermes"
    return None


def template_for_tools(template: str) -> str | None:
    """None: the model's own template takes the tools."""
    return None if "tools" in template else CHATML_TOOLS


def render(template: str, messages: list[ChatMessage], tools: tuple[Tool, ...]) -> str:
    """A chat template rendered as Hugging Face renders it, for an engine that cannot take ours."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda value: json.dumps(value, ensure_ascii=False)
    return env.from_string(template).render(
        messages=message_dicts(messages), tools=tool_dicts(tools) or None, add_generation_prompt=True
    )


def message_dicts(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    return [message_dict(m) for m in messages]


def message_dict(message: ChatMessage) -> dict[str, Any]:
    """Arguments as objects (templates write them with `tojson`); a past turn's reasoning under
    the names templates read it by: `thinking` (gpt-oss) and `reasoning_content`."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _arguments(c.arguments)}}
            for c in message.tool_calls
        ]
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    if message.name:
        out["name"] = message.name
    if message.reasoning:
        out["thinking"] = out["reasoning_content"] = message.reasoning
    return out


def openai_message(message: ChatMessage) -> dict[str, Any]:
    """The same turn as OpenAI's API sends it (arguments as JSON text), for a server behind us."""
    out = message_dict(message)
    out.pop("thinking", None)
    for call, sent in zip(message.tool_calls, out.get("tool_calls", ())):
        sent["function"]["arguments"] = call.arguments
    if message.tool_calls and not message.content:
        out["content"] = None
    return out


def tool_dicts(tools: tuple[Tool, ...]) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in tools
    ]


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # nested past the parser's depth: the text as it came
        return text
