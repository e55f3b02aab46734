"""A Messages API request as the chat request the pipeline runs: the system blocks and the turns
become chat messages (a user's tool results become tool messages, an assistant's tool_use blocks
its tool calls, its thinking the reasoning read back from the signature), client tools and
`tool_choice` their chat forms, `thinking` and `output_config.effort` the model's reasoning
effort. One pipeline under every API, so the door, fair share, limits and usage treat them alike."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from protocols.anthropic_messages.request import (
    MessageParam,
    MessagesRequest,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    Tool,
    ToolChoice,
    ToolResultBlock,
    ToolUseBlock,
)
from protocols.openai_chat.request import ChatCompletionRequest

Unseal = Callable[[str], str]  # a thinking block's signature -> its text; raises where it is not this caller's
_EFFORT = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}


def chat_request(body: MessagesRequest, tools: list[Tool], unseal: Unseal) -> ChatCompletionRequest:
    fields: dict[str, Any] = {
        "model": body.model,
        "messages": chat_messages(body, unseal),
        "stream": body.stream,
        "max_tokens": body.max_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "top_k": body.top_k,
        "stop": body.stop_sequences or None,
        "reasoning_effort": reasoning_effort(body),
        "priority": body.priority,
        "request_id": body.request_id,
    }
    choice = body.tool_choice
    if tools and not (choice is not None and choice.type == "none"):
        fields["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                    "strict": t.strict,
                },
            }
            for t in tools
        ]
        fields["tool_choice"] = _tool_choice(choice)
        if choice is not None and choice.disable_parallel_tool_use:
            fields["parallel_tool_calls"] = False
    if body.output_config is not None and body.output_config.format is not None:
        fields["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": body.output_config.format.schema_},
        }
    return ChatCompletionRequest.model_validate({k: v for k, v in fields.items() if v is not None})


def reasoning_effort(body: MessagesRequest) -> str | None:
    """gpt-oss always reasons; `disabled` asks for the least, a thinking budget for about as much as
    it names, `output_config.effort` wins where given. Models without reasoning ignore it."""
    if body.output_config is not None and body.output_config.effort is not None:
        return _EFFORT[body.output_config.effort]
    thinking = body.thinking
    if thinking is None:
        return None
    if thinking.type == "disabled":
        return "low"
    budget = thinking.budget_tokens or 0
    return "medium" if thinking.type == "adaptive" or budget < 16_384 else "high"


def chat_messages(body: MessagesRequest, unseal: Unseal) -> list[dict]:
    messages: list[dict] = [{"role": "system", "content": body.system_text}] if body.system_text else []
    for message in body.messages:
        messages += _assistant(message, unseal) if message.role == "assistant" else _user(message)
    return messages


def _user(message: MessageParam) -> list[dict]:
    """Tool results first, as tool messages, then the user's own text, as Anthropic orders them."""
    out: list[dict] = []
    text = ""
    for block in message.blocks:
        if isinstance(block, ToolResultBlock):
            out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": block.text})
        elif isinstance(block, TextBlock):
            text += block.text
    return out + ([{"role": "user", "content": text}] if text or not out else [])


def _assistant(message: MessageParam, unseal: Unseal) -> list[dict]:
    text, thinking, calls = "", "", []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            text += block.text
        elif isinstance(block, ThinkingBlock):
            thinking += unseal(block.signature)
        elif isinstance(block, RedactedThinkingBlock):
            thinking += unseal(block.data)
        elif isinstance(block, ToolUseBlock):
            calls.append(
                {
                    "id": block.id,
                    "type": "function",
                    "function": {"name": block.name, "arguments": json.dumps(block.input, ensure_ascii=False)},
                }
            )
    turn: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        turn["tool_calls"] = calls
    if thinking:
        turn["reasoning_content"] = thinking
    return [turn]


def _tool_choice(choice: ToolChoice | None) -> Any:
    if choice is None or choice.type == "auto":
        return "auto"
    if choice.type == "any":
        return "required"
    return {"type": "function", "function": {"name": choice.name or ""}}
