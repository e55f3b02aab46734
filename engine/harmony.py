"""OpenAI's harmony format, as gpt-oss writes it: the output is a sequence of messages on channels,
`<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...<|return|>`.

`HarmonyParser` is fed the engine's text incrementally (decoded with special tokens kept) and
splits it into reasoning (analysis and commentary channels) and answer (final channel), never
letting a marker through, however the text is cut. With `tools`, it also reads calls: a message
addressed `to=functions.NAME` (on any channel, the recipient before or after the channel), and
shows commentary with no recipient (a preamble to calls) as answer. `split_channels` applies it to
an engine's stream of deltas. Pure: no engine, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import replace

from core.types import Delta
from engine.tool_output import Parsed, call_deltas

MESSAGE, CHANNEL = "<|message|>", "<|channel|>"
ENDS = ("<|end|>", "<|return|>", "<|call|>", "<|start|>")
MARKERS = (MESSAGE, CHANNEL, "<|constrain|>", *ENDS)
ANSWER, PREAMBLE = "final", "commentary"
FUNCTIONS = "functions."
_LONGEST = max(map(len, MARKERS))
_HEADER_LIMIT = 256  # a header this long without a marker means the model is not writing harmony
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")


class HarmonyParser:
    def __init__(self, tools: bool = False) -> None:
        self._tools = tools
        self._pending = ""  # text not yet decided: a header, or a body's tail that may start a marker
        self._channel: str | None = None  # None: between messages, reading a header
        self._recipient: str | None = None  # the message's `to=`
        self._arguments = ""  # a call's body so far
        self._calls = 0

    @property
    def in_answer(self) -> bool:
        """Inside a message for the user: the final channel or, with tools, a preamble; a message
        addressed to a tool is never for the user."""
        if not self._tools:
            return self._channel == ANSWER
        return self._recipient is None and self._channel in (ANSWER, PREAMBLE)

    @property
    def in_call(self) -> bool:
        recipient = self._recipient or ""
        return self._tools and recipient.startswith(FUNCTIONS) and len(recipient) > len(FUNCTIONS)

    def feed(self, text: str) -> Parsed:
        self._pending += text
        parts: list[Parsed] = []
        while self._pending:
            if self._channel is None:
                if not self._read_header():
                    break
                continue
            body, ended = self._read_body()
            parts.append(self._take(body))
            if not ended:
                break
            parts.append(self._end_message())
        return sum(parts, Parsed())

    def finish(self) -> Parsed:
        """The held-back tail at the end of the output: text, since no marker completed; the end
        of the output also ends a call, so it is read."""
        tail, self._pending = self._pending, ""
        if self._channel is None:
            return Parsed() if "<|" in tail else Parsed(tail)  # an unfinished header, or plain text
        return self._take(tail) + self._end_message()

    def _take(self, body: str) -> Parsed:
        """A call's body is held: only once it has ended can it be told from broken JSON."""
        if self.in_call:
            self._arguments += body
            return Parsed()
        return Parsed(answer=body) if self.in_answer else Parsed(reasoning=body)

    def _end_message(self) -> Parsed:
        done = Parsed()
        if self.in_call:
            name = (self._recipient or "")[len(FUNCTIONS) :]
            calls = call_deltas(self._calls, name, self._arguments)
            if calls is None:
                done = Parsed(answer=self._arguments, errors=1)
            else:
                self._calls += 1
                done = Parsed(calls=calls)
        self._channel, self._recipient, self._arguments = None, None, ""
        return done

    def _read_header(self) -> bool:
        at = self._pending.find(MESSAGE)
        if at < 0:
            if len(self._pending) > _HEADER_LIMIT and "<|" not in self._pending:
                self._channel = ANSWER  # plain text after all: pass it through as the answer
                return True
            return False
        header, self._pending = self._pending[:at], self._pending[at + len(MESSAGE) :]
        self._channel = _channel_of(header)
        found = _RECIPIENT.search(header)
        self._recipient = found.group(1) if found else None
        return True

    def _read_body(self) -> tuple[str, bool]:
        """(text up to the next end marker, whether one was found); keeps a possible marker's start."""
        ends = [(at, marker) for marker in ENDS if (at := self._pending.find(marker)) >= 0]
        if ends:
            at, marker = min(ends)
            body, self._pending = self._pending[:at], self._pending[at + len(marker) :]
            return _unmarked(body), True
        keep = _partial_marker_len(self._pending)
        cut = len(self._pending) - keep
        body, self._pending = self._pending[:cut], self._pending[cut:]
        return _unmarked(body), False


def _unmarked(body: str) -> str:
    """A header marker inside a message body is a model's slip; it never reaches the reader."""
    for marker in (MESSAGE, CHANNEL, "<|constrain|>"):
        body = body.replace(marker, "")
    return body


def _channel_of(header: str) -> str:
    """`assistant<|channel|>commentary to=functions.f <|constrain|>json` -> commentary."""
    _, found, rest = header.partition(CHANNEL)
    if not found:
        return ANSWER
    name = rest.split("<|", 1)[0].split()
    return name[0] if name else ANSWER


def _partial_marker_len(text: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of some marker."""
    for size in range(min(len(text), _LONGEST - 1), 0, -1):
        tail = text[-size:]
        if any(marker.startswith(tail) for marker in MARKERS):
            return size
    return 0


async def split_channels(deltas: AsyncIterator[Delta], tools: bool = False) -> AsyncIterator[Delta]:
    """An engine's deltas with the answer in `text`, the reasoning in `reasoning` and, with
    `tools`, calls in `tool_calls`. A delta's tokens count as reasoning unless it carries no
    reasoning and ends inside an answer or a call, or carries a call's end."""
    parser = HarmonyParser(tools)
    async for delta in deltas:
        parsed = parser.feed(delta.text)
        if delta.finish_reason:
            parsed += parser.finish()
        visible = parser.in_answer or parser.in_call or parsed.calls or parsed.errors
        reasoning_tokens = 0 if visible and not parsed.reasoning else delta.num_tokens
        yield replace(
            delta,
            text=parsed.answer,
            reasoning=parsed.reasoning,
            reasoning_tokens=reasoning_tokens,
            tool_calls=delta.tool_calls + parsed.calls,
            tool_call_errors=delta.tool_call_errors + parsed.errors,
        )
