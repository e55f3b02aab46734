"""`tool_choice` kept by the engine: a forced call (`required`, or a named function) is asked of
the engine as JSON under a schema (its structured outputs), and that JSON is read back as calls.
The model's own call format plays no part, so it works for any model that takes a schema. Pure."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from core.types import Delta, ToolCallDelta, ToolUse
from engine.tool_output import call_deltas


def is_forced(use: ToolUse | None) -> bool:
    return use is not None and use.choice != "auto"


def forced_schema(use: ToolUse) -> dict[str, Any]:
    """Named: the function's arguments. Required: a list of calls, `[{"name", "arguments"}]`."""
    by_name = {t.name: t for t in use.tools}
    if use.choice in by_name:
        return by_name[use.choice].parameters
    calls = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": t.parameters},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in use.tools
    ]
    schema: dict[str, Any] = {"type": "array", "items": {"anyOf": calls}, "minItems": 1}
    if not use.parallel:
        schema["maxItems"] = 1
    return schema


class ForcedCallReader:
    """Holds the answer until it ends, then hands it on as calls; JSON that does not read as the
    calls asked for (an answer cut by max_tokens) goes back as text, counted as a parse error."""

    def __init__(self, use: ToolUse) -> None:
        self.use = use
        self._text = ""

    def feed(self, delta: Delta) -> Delta:
        self._text += delta.text
        if not delta.finish_reason:
            return replace(delta, text="")
        calls = self._calls()
        if calls is None:
            return replace(delta, text=self._text, tool_call_errors=delta.tool_call_errors + 1)
        return replace(delta, text="", tool_calls=calls)

    def _calls(self) -> tuple[ToolCallDelta, ...] | None:
        try:
            value = json.loads(self._text)
        except ValueError:
            return None
        names = {t.name for t in self.use.tools}
        if self.use.choice in names:
            return call_deltas(0, self.use.choice, self._text)
        if not isinstance(value, list) or not value:
            return None
        out: list[ToolCallDelta] = []
        for index, call in enumerate(value):
            if not isinstance(call, dict) or call.get("name") not in names:
                return None
            deltas = call_deltas(index, call["name"], json.dumps(call.get("arguments", {}), ensure_ascii=False))
            if deltas is None:
                return None
            out.extend(deltas)
        return tuple(out)
