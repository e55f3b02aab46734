"""The Hermes / Qwen tool-call form that many open models (and our ChatML tool template) write:
`text<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>`, repeated for parallel calls.

`ToolCallParser` is fed the engine's text incrementally and never lets part of a tag into the
answer, however the text is cut. A call is held until its closing tag, so a bad one goes back as
text instead of half a call. `split_tool_calls` applies it to an engine's stream. Pure.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from core.types import Delta, Tool, ToolCallDelta
from engine.tool_output import Parsed, call_deltas

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class ToolCallParser:
    def __init__(self) -> None:
        self._pending = ""  # undecided: a call's inside, or trailing whitespace and a tag's start
        self._inside = False
        self._gap = ""  # whitespace before the open tag: dropped for a call, kept for a bad one
        self._after_call = False  # models put newlines between and after calls; they are not answer
        self._index = 0

    def feed(self, text: str) -> Parsed:
        self._pending += text
        out = Parsed()
        while True:
            if self._inside:
                at = self._pending.find(CLOSE)
                if at < 0:
                    return out
                body, self._pending = self._pending[:at], self._pending[at + len(CLOSE) :]
                out += self._close(body, CLOSE)
                continue
            at = self._pending.find(OPEN)
            if at < 0:
                head = self._pending[: len(self._pending) - _partial_len(self._pending, OPEN)]
                decided = head.rstrip()  # trailing whitespace waits: a tag may follow it
                self._pending = self._pending[len(decided) :]
                return out + self._text(decided)
            before, self._pending = self._pending[:at], self._pending[at + len(OPEN) :]
            decided = before.rstrip()
            out += self._text(decided)
            self._gap = "" if self._after_call else before[len(decided) :]
            self._inside = True

    def finish(self) -> Parsed:
        """The held tail. An unclosed call that parses is a call: small models often stop early."""
        tail, self._pending = self._pending, ""
        if not self._inside:
            return self._text(tail)
        cut = len(tail) - _partial_len(tail, CLOSE)
        return self._close(tail[:cut], tail[cut:])

    def _text(self, text: str) -> Parsed:
        if self._after_call:
            text = text.lstrip()
            self._after_call = not text
        return Parsed(text)

    def _close(self, body: str, closing: str) -> Parsed:
        self._inside = False
        calls = self._call(body)
        if calls is None:
            self._after_call = False
            return Parsed(self._gap + OPEN + body + closing, errors=1)
        self._index += 1
        self._after_call = True
        return Parsed(calls=calls)

    def _call(self, body: str) -> tuple[ToolCallDelta, ...] | None:
        try:
            call: Any = json.loads(body)
        except ValueError:
            return None
        if not isinstance(call, dict) or not isinstance(name := call.get("name"), str) or not name:
            return None
        arguments = call.get("arguments", call.get("parameters"))
        if isinstance(arguments, str):  # some models encode the arguments twice
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                return None
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return None
        return call_deltas(self._index, name, json.dumps(arguments, ensure_ascii=False))


def _partial_len(text: str, marker: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `marker`."""
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


async def split_tool_calls(deltas: AsyncIterator[Delta]) -> AsyncIterator[Delta]:
    """An engine's deltas with the answer in `text` and finished calls in `tool_calls`."""
    parser = ToolCallParser()
    async for delta in deltas:
        parsed = parser.feed(delta.text)
        if delta.finish_reason:
            parsed += parser.finish()
        yield replace(delta, text=parsed.answer, tool_calls=parsed.calls, tool_call_errors=parsed.errors)


def strict_calls(tools: tuple[Tool, ...]) -> dict[str, Any]:
    """A structural tag for vLLM's structured outputs: free text until `<tool_call>`, then a call
    whose arguments follow its function's schema (`strict: true` in auto mode)."""
    structures = [
        {
            "begin": f'{OPEN}\n{{"name": {json.dumps(t.name)}, "arguments": ',
            "schema": t.parameters,
            "end": f"}}\n{CLOSE}",
        }
        for t in tools
    ]
    return {"type": "structural_tag", "structures": structures, "triggers": [OPEN]}
