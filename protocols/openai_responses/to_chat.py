"""A Responses API request as the chat request the pipeline runs: the history's items and the new
input become chat messages, function tools and `text.format` their chat forms. One pipeline under
both APIs, so the door, fair share, limits, usage and the cache treat them alike."""

from __future__ import annotations

import json
from typing import Any

from protocols.openai_chat.request import ChatCompletionRequest
from protocols.openai_responses.request import (
    CustomCallItem,
    CustomCallOutputItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    Item,
    MessageItem,
    NamedFunction,
    ReasoningItem,
    ResponsesRequest,
    TextFormat,
    json_schema_format,
)


def chat_request(body: ResponsesRequest, items: list[Item], tools: list[FunctionTool]) -> ChatCompletionRequest:
    fields: dict[str, Any] = {
        "model": body.model,
        "messages": chat_messages(body.instructions, items),
        "stream": body.stream,
        "max_tokens": body.max_output_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "reasoning_effort": body.reasoning.effort if body.reasoning else None,
        "priority": body.priority,
    }
    if tools and body.tool_choice != "none":
        fields["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                    "strict": t.strict,
                },
            }
            for t in tools
        ]
        fields["tool_choice"] = _tool_choice(body.tool_choice)
        fields["parallel_tool_calls"] = body.parallel_tool_calls
    if body.text is not None and body.text.format is not None:
        fields["response_format"] = _response_format(body.text.format)
    return ChatCompletionRequest.model_validate({k: v for k, v in fields.items() if v is not None})


def chat_messages(instructions: str | None, items: list[Item]) -> list[dict]:
    """Reasoning goes on the assistant turn that follows it; consecutive calls are one turn. A
    custom tool's call is a function call with its text as the one argument, `input`."""
    messages: list[dict] = [{"role": "developer", "content": instructions}] if instructions else []
    thinking = ""
    for item in items:
        if isinstance(item, ReasoningItem):
            thinking += item.text
        elif isinstance(item, MessageItem) and item.role == "assistant":
            messages.append({"role": "assistant", "content": item.text, **_reasoning(thinking)})
            thinking = ""
        elif isinstance(item, MessageItem):
            messages.append({"role": item.role, "content": item.text})
        elif isinstance(item, (FunctionCallItem, CustomCallItem)):
            arguments = item.arguments if isinstance(item, FunctionCallItem) else json.dumps({"input": item.input})
            call = {"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": arguments}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last and not thinking:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call], **_reasoning(thinking)})
            thinking = ""
        elif isinstance(item, FunctionCallOutputItem) and item.call_id is None:
            name = f"{item.namespace}.{item.name}" if item.namespace else str(item.name)
            messages.append({"role": "tool", "tool_call_id": name, "name": name, "content": item.text})
        elif isinstance(item, (FunctionCallOutputItem, CustomCallOutputItem)):
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text})
    return messages


def _reasoning(text: str) -> dict:
    return {"reasoning_content": text} if text else {}


def _tool_choice(choice: str | NamedFunction | None) -> Any:
    if isinstance(choice, NamedFunction):
        return {"type": "function", "function": {"name": choice.name}}
    return choice


def _response_format(fmt: TextFormat) -> dict:
    if fmt.type != "json_schema":
        return {"type": fmt.type}
    spec = json_schema_format(fmt)
    return {"type": "json_schema", "json_schema": spec.model_dump(by_alias=True, exclude_none=True)}
