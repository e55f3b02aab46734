"""Responses API objects from the pipeline's events: the `response` object with its output items,
and the stream of `response.*` events with their sequence numbers."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pipeline.events import Finished, Queued, ReasoningDelta, Refused, Started, TextDelta, ToolCallPiece, Usage
from pipeline.refusal import Refusal
from protocols.openai_chat.render import queue_comment
from protocols.openai_responses.request import CustomTool, FunctionTool, NamedFunction, ResponsesRequest

_NULLABLE = {"error", "incomplete_details", "instructions"}  # OpenAI's schema wants these present, null or not


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


@dataclass(slots=True)
class ResponseShape:
    """What every state of one response shares: its id, the request's settings echoed back."""

    id: str
    model: str
    body: ResponsesRequest
    tools: list[FunctionTool]
    custom: list[CustomTool] = field(default_factory=list)
    seal: Callable[[str], str] | None = None  # reasoning as encrypted_content, when the request includes it
    created_at: int = field(default_factory=lambda: int(time.time()))

    def envelope(
        self,
        status: str,
        output: list[dict],
        usage: Usage | None = None,
        error: dict | None = None,
        incomplete: str | None = None,
    ) -> dict:
        body = self.body
        choice = body.tool_choice
        shape = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": body.background,
            "error": error,
            "incomplete_details": {"reason": incomplete} if incomplete else None,
            "instructions": body.instructions,
            "max_output_tokens": body.max_output_tokens,
            "max_tool_calls": None,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": body.parallel_tool_calls is not False,
            "previous_response_id": body.previous_response_id,
            "reasoning": {"effort": body.reasoning.effort if body.reasoning else None, "summary": None},
            "store": body.store,
            "temperature": body.temperature if body.temperature is not None else 1.0,
            "text": {"format": {"type": "text"}}
            if body.text is None or body.text.format is None
            else {"format": body.text.format.model_dump(by_alias=True, exclude_none=True)},
            "tool_choice": choice.model_dump() if isinstance(choice, NamedFunction) else choice or "auto",
            "tools": [
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters or {"type": "object", "properties": {}},
                    "strict": bool(t.strict),
                }
                for t in self.tools
            ]
            + [
                {
                    "type": "custom",
                    "name": t.name,
                    **({"description": t.description} if t.description else {}),
                    "format": {"type": "text"},
                }
                for t in self.custom
            ],
            "top_p": body.top_p if body.top_p is not None else 1.0,
            "truncation": body.truncation or "disabled",
            "user": body.user,
            "metadata": body.metadata or {},
            "usage": usage_of(usage) if usage is not None else None,
        }
        return {k: v for k, v in shape.items() if v is not None or k in _NULLABLE}

    def finished(self, finished: Finished, output: list[dict]) -> dict:
        length = finished.finish_reason == "length"
        return self.envelope(
            "incomplete" if length else "completed",
            output,
            finished.usage,
            incomplete="max_output_tokens" if length else None,
        )

    def failed(self, refusal: Refusal, output: list[dict]) -> dict:
        code = "rate_limit_exceeded" if refusal.status == 429 else "server_error"  # the codes OpenAI's schema allows
        return self.envelope("failed", output, error={"code": code, "message": refusal.message})

    def is_custom(self, name: str | None) -> bool:
        return any(t.name == name for t in self.custom)

    def output_items(self, finished: Finished) -> list[dict]:
        """The whole answer as items: reasoning, the message, then each call."""
        items = []
        if finished.reasoning:
            items.append(reasoning_item(new_id("rs"), finished.reasoning, seal=self.seal))
        if finished.text or not finished.tool_calls:
            items.append(message_item(new_id("msg"), finished.text))
        for c in finished.tool_calls:
            custom = self.is_custom(c.name)
            items.append(
                (custom_call_item if custom else call_item)(
                    new_id("ctc" if custom else "fc"), c.id, c.name, c.arguments
                )
            )
        return items


def reasoning_item(
    item_id: str, text: str, status: str = "completed", seal: Callable[[str], str] | None = None
) -> dict:
    item = {
        "type": "reasoning",
        "id": item_id,
        "summary": [],
        "status": status,
        "content": [{"type": "reasoning_text", "text": text}] if status == "completed" else [],
    }
    if seal is not None and status == "completed":
        item["encrypted_content"] = seal(text)
    return item


def message_item(item_id: str, text: str, status: str = "completed") -> dict:
    content = [text_part(text)] if status == "completed" else []
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str = "completed") -> dict:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def custom_call_item(item_id: str, call_id: str, name: str, arguments: str, status: str = "completed") -> dict:
    """The engine wrote `{"input": text}`; the client gets the text (or what was written, if not that)."""
    try:
        text = json.loads(arguments)["input"] if arguments else ""
    except (ValueError, KeyError, TypeError):
        text = arguments
    return {
        "type": "custom_tool_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "input": text if isinstance(text, str) else arguments,
        "status": status,
    }


def listed(item: dict, default_id: str) -> dict:
    """An input item as the list shows it: with an id and a status, a message's text as parts."""
    shown = {"id": item.get("id") or default_id, **item}
    if item.get("type") in ("function_call", "function_call_output") or item.get("role") == "assistant":
        shown.setdefault("status", "completed")
    if isinstance(content := item.get("content"), str):
        shown["content"] = [
            text_part(content) if item.get("role") == "assistant" else {"type": "input_text", "text": content}
        ]
    return shown


def usage_of(usage: Usage) -> dict:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


class EventWriter:
    """The Responses API's stream (an EventRenderer): `response.*` events, an output item opening
    when its kind of delta first arrives and closing when another kind does or the answer ends;
    the finished response is handed to `keep` (stored) before the client hears it completed."""

    def __init__(self, shape: ResponseShape, keep: Callable[[dict], Awaitable[None]] | None = None) -> None:
        self.shape = shape
        self.keep = keep
        self.sequence = 0
        self.items: list[dict] = []  # closed output items
        self._open: dict | None = None
        self._text = ""

    def event(self, kind: str, **fields: Any) -> str:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(payload, separators=(',', ':'), ensure_ascii=False)}\n\n"

    def begin(self) -> list[str]:
        pending = self.shape.envelope("in_progress", [])
        return [self.event("response.created", response=pending), self.event("response.in_progress", response=pending)]

    async def queued(self, event: Queued) -> list[str]:
        return [queue_comment(event)]

    async def started(self, event: Started) -> list[str]:
        return []

    async def reasoning(self, event: ReasoningDelta) -> list[str]:
        out: list[str] = []
        if self._kind() != "reasoning":
            out += self._close() + self._start(
                reasoning_item(new_id("rs"), "", "in_progress"), {"type": "reasoning_text", "text": ""}
            )
        self._text += event.text
        return [*out, self.event("response.reasoning_text.delta", **self._at(), content_index=0, delta=event.text)]

    async def text(self, event: TextDelta) -> list[str]:
        out: list[str] = []
        if self._kind() != "message":
            out += self._close() + self._start(message_item(new_id("msg"), "", "in_progress"), text_part(""))
        self._text += event.text
        return [
            *out,
            self.event("response.output_text.delta", **self._at(), content_index=0, delta=event.text, logprobs=[]),
        ]

    async def tool_call(self, event: ToolCallPiece) -> list[str]:
        if event.id is None:
            return self._arguments(event.arguments)
        custom = self.shape.is_custom(event.name)
        item = (custom_call_item if custom else call_item)(
            new_id("ctc" if custom else "fc"), event.id, event.name or "", "", "in_progress"
        )
        return self._close() + self._start(item) + (self._arguments(event.arguments) if event.arguments else [])

    async def finished(self, event: Finished) -> list[str]:
        """The closing events, once the response is kept."""
        if not self.items and self._open is None and not event.tool_calls:
            out = self._start(message_item(new_id("msg"), "", "in_progress"), text_part("")) + self._close()
        else:
            out = self._close()
        response = self.shape.finished(event, self.items)
        if self.keep is not None:
            await self.keep(response)
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        return out + [self.event(kind, response=response)]

    async def refused(self, event: Refused) -> list[str]:
        refusal = event.refusal
        error = self.event("error", code=refusal.code, message=refusal.message, param=refusal.param)
        return self._close() + [error, self.event("response.failed", response=self.shape.failed(refusal, self.items))]

    def _kind(self) -> str | None:
        return None if self._open is None else self._open["type"]

    def _at(self) -> dict:
        assert self._open is not None  # only while an item is open
        return {"item_id": self._open["id"], "output_index": len(self.items)}

    def _start(self, item: dict, part: dict | None = None) -> list[str]:
        self._open, self._text = item, ""
        out = [self.event("response.output_item.added", output_index=len(self.items), item=item)]
        if part is not None:
            out.append(self.event("response.content_part.added", **self._at(), content_index=0, part=part))
        return out

    def _arguments(self, text: str) -> list[str]:
        """A custom tool's input is sent whole when its call closes: it is read out of the JSON."""
        self._text += text
        if self._kind() == "custom_tool_call":
            return []
        return [self.event("response.function_call_arguments.delta", **self._at(), delta=text)]

    def _close(self) -> list[str]:
        item = self._open
        if item is None:
            return []
        at, text, out = self._at(), self._text, []
        if item["type"] == "reasoning":
            done = reasoning_item(item["id"], text, seal=self.shape.seal)
            out += [
                self.event("response.reasoning_text.done", **at, content_index=0, text=text),
                self.event("response.content_part.done", **at, content_index=0, part=done["content"][0]),
            ]
        elif item["type"] == "message":
            done = message_item(item["id"], text)
            out += [
                self.event("response.output_text.done", **at, content_index=0, text=text, logprobs=[]),
                self.event("response.content_part.done", **at, content_index=0, part=done["content"][0]),
            ]
        elif item["type"] == "custom_tool_call":
            done = custom_call_item(item["id"], item["call_id"], item["name"], text)
            out += [
                self.event("response.custom_tool_call_input.delta", **at, delta=done["input"]),
                self.event("response.custom_tool_call_input.done", **at, input=done["input"]),
            ]
        else:
            done = call_item(item["id"], item["call_id"], item["name"], text)
            out.append(self.event("response.function_call_arguments.done", **at, name=item["name"], arguments=text))
        out.append(self.event("response.output_item.done", output_index=len(self.items), item=done))
        self.items.append(done)
        self._open = None
        return out
