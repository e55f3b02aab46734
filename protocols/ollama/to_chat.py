"""An Ollama request as the chat completion the pipeline runs: its messages (a tool result paired
with the call it answers), options as sampling fields, `format` as a response format, `think` as
the reasoning effort. One pipeline under every API, so the door, fair share, limits and usage
treat them alike."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from protocols.ollama.request import ChatRequest, GenerateRequest, Message, Options


class Untranslatable(ValueError):
    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def served_name(model: str) -> str:
    """Ollama names carry a tag (`name:latest` where none is given): the served model answers to both."""
    return model.removesuffix(":latest")


def chat_fields(body: ChatRequest | GenerateRequest, served: str) -> dict[str, Any]:
    """The chat completion request's fields, before it checks them."""
    options = body.options or Options()
    messages = chat_messages(body.messages) if isinstance(body, ChatRequest) else _prompt_messages(body)
    fields: dict[str, Any] = {
        "model": served if served_name(body.model) == served else body.model,
        "messages": messages,
        "stream": body.stream,
        "max_tokens": options.num_predict if options.num_predict and options.num_predict > 0 else None,
        "temperature": options.temperature,
        "top_p": options.top_p,
        "top_k": options.top_k,
        "min_p": options.min_p,
        "seed": options.seed if options.seed is None or options.seed >= 0 else None,  # Ollama's -1: random
        "stop": options.stop,
        "repetition_penalty": options.repeat_penalty,
        "presence_penalty": options.presence_penalty,
        "frequency_penalty": options.frequency_penalty,
        "response_format": _response_format(body.format),
        "logprobs": body.logprobs,
        "top_logprobs": body.top_logprobs,
        **_thinking(body.think),
    }
    if options.num_predict == 0:
        raise Untranslatable("options.num_predict", "options.num_predict must be positive, -1 or -2; got 0")
    if isinstance(body, ChatRequest) and body.tools:
        fields["tools"] = body.tools
    return {k: v for k, v in fields.items() if v is not None}


def text_fields(body: GenerateRequest, served: str) -> dict[str, Any]:
    """`raw: true`: the text completion request's fields, the prompt continued as given. What only
    a chat has (`system`, `format`, a thinking level) is refused, not dropped."""
    for name, given in (("system", body.system), ("format", body.format), ("think", body.think)):
        if given not in (None, "", False):
            raise Untranslatable(name, f"{name} is not supported with raw: true (the prompt is continued as given)")
    if body.top_logprobs is not None and not body.logprobs:
        raise Untranslatable("top_logprobs", "top_logprobs needs logprobs: true")
    fields = chat_fields(body, served)
    for chat_only in ("messages", "include_reasoning", "top_logprobs", "logprobs"):
        fields.pop(chat_only, None)
    if body.logprobs:
        fields["logprobs"] = body.top_logprobs or 0
    return {**fields, "prompt": body.prompt}


def chat_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """A tool message answers a call of the assistant turn before it: the one it names
    (`tool_call_id`, or the first unanswered of `tool_name`), else the next unanswered."""
    out: list[dict[str, Any]] = []
    unanswered = _Unanswered([])
    for i, message in enumerate(messages):
        _check_turn(message, i)
        if message.role == "tool":
            call_id = unanswered.answer(message.tool_call_id, message.tool_name)
            if call_id is None:
                raise Untranslatable(
                    f"messages.{i}", "a tool message must answer a tool call of the assistant turn before it"
                )
            out.append({"role": "tool", "content": message.content or "", "tool_call_id": call_id})
            continue
        turn: dict[str, Any] = {"role": message.role, "content": message.content or ""}
        if message.role == "assistant":
            calls = [(call.id or f"call_{i}_{j}", call.function) for j, call in enumerate(message.tool_calls or ())]
            _check_ids([call_id for call_id, _ in calls], i)
            unanswered = _Unanswered([(call_id, function.name) for call_id, function in calls])
            if calls:
                turn["tool_calls"] = [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": f.name, "arguments": json.dumps(f.arguments)},
                    }
                    for call_id, f in calls
                ]
                turn["content"] = message.content or None
            if message.thinking:
                turn["reasoning_content"] = message.thinking
        out.append(turn)
    return out


def _check_turn(message: Message, i: int) -> None:
    """What only another role's message holds is refused, not dropped."""
    held = {
        "thinking": message.thinking and message.role != "assistant",
        "tool_calls": message.tool_calls and message.role != "assistant",
        "tool_name": message.tool_name is not None and message.role != "tool",
        "tool_call_id": message.tool_call_id is not None and message.role != "tool",
    }
    for field, wrong in held.items():
        if wrong:
            raise Untranslatable(f"messages.{i}.{field}", f"a {message.role} message cannot hold {field}")


def _check_ids(ids: list[str], i: int) -> None:
    """A result names its call by id: two calls of one turn with the same id could not be told apart."""
    seen: set[str] = set()
    for j, call_id in enumerate(ids):
        if call_id in seen:
            raise Untranslatable(
                f"messages.{i}.tool_calls.{j}.id", f"the id {call_id!r} is a second call's of this turn"
            )
        seen.add(call_id)


class _Unanswered:
    """The calls of the last assistant turn not answered yet, each found at once: scanning a list
    per tool message, a turn of 10,000 calls answered in reverse order held the event loop 17.7 s."""

    def __init__(self, calls: list[tuple[str, str]]) -> None:
        self.names = dict(calls)  # id -> name
        self.order = deque(call_id for call_id, _ in calls)
        self.by_name: dict[str, deque[str]] = {}
        for call_id, name in calls:
            self.by_name.setdefault(name, deque()).append(call_id)

    def answer(self, call_id: str | None, name: str | None) -> str | None:
        """The id of the call a tool message answers (now answered), or None."""
        if call_id is not None:
            found = call_id if call_id in self.names and name in (None, self.names[call_id]) else None
        else:
            waiting = self.order if name is None else self.by_name.get(name, deque())
            while waiting and waiting[0] not in self.names:
                waiting.popleft()
            found = waiting[0] if waiting else None
        if found is not None:
            del self.names[found]
        return found


def _prompt_messages(body: GenerateRequest) -> list[dict[str, Any]]:
    messages = [{"role": "system", "content": body.system}] if body.system else []
    return [*messages, {"role": "user", "content": body.prompt or ""}]


def _response_format(fmt: str | dict[str, Any] | None) -> dict[str, Any] | None:
    if fmt is None or fmt == "":
        return None
    if fmt == "json" or fmt == {}:  # an empty schema: any JSON, as Ollama reads it
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": "format", "schema": fmt, "strict": True}}


def _thinking(think: bool | str | None) -> dict[str, Any]:
    """`think`: a level is the reasoning effort (as on chat, `X-Reasoning-Effort: ignored` where
    the model takes none); false leaves the thinking out of the answer (gpt-oss reasons whatever
    it is told, so its tokens are spent all the same)."""
    if think is False:
        return {"include_reasoning": False}
    return {"reasoning_effort": think} if isinstance(think, str) else {}
