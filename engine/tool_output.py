"""What an output parser makes of a piece of model text: answer, reasoning, finished tool calls.
Shared by the harmony and the `<tool_call>` parsers. Pure."""

from __future__ import annotations

import json
from dataclasses import dataclass

from core.types import ToolCallDelta, new_call_id


@dataclass(slots=True, frozen=True)
class Parsed:
    answer: str = ""
    reasoning: str = ""
    calls: tuple[ToolCallDelta, ...] = ()
    errors: int = 0  # text that looked like a call and did not parse; it is in `answer`

    def __add__(self, other: Parsed) -> Parsed:
        return Parsed(
            self.answer + other.answer,
            self.reasoning + other.reasoning,
            self.calls + other.calls,
            self.errors + other.errors,
        )


def call_deltas(index: int, name: str, arguments: str) -> tuple[ToolCallDelta, ...] | None:
    """A finished call as OpenAI streams it (name first, then the arguments), or None when the
    arguments are not a JSON object. A call is held until it ends, so a bad one can still go
    back as text instead of half a call."""
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    return (ToolCallDelta(index, new_call_id(), name, ""), ToolCallDelta(index, arguments=arguments.strip() or "{}"))
