"""OpenAI's harmony format, as gpt-oss writes it: the output is a sequence of messages on channels,
`<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...<|return|>`.

`HarmonyParser` is fed the engine's text incrementally (decoded with special tokens kept) and
splits it into reasoning (analysis and commentary channels) and answer (final channel), never
letting a marker through, however the text is cut. `split_channels` applies it to an engine's
stream of deltas. Pure: no engine, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import AsyncIterator

from core.types import Delta

MESSAGE, CHANNEL = "<|message|>", "<|channel|>"
ENDS = ("<|end|>", "<|return|>", "<|call|>", "<|start|>")
MARKERS = (MESSAGE, CHANNEL, "<|constrain|>", *ENDS)
ANSWER = "final"
_LONGEST = max(map(len, MARKERS))
_HEADER_LIMIT = 256  # a header this long without a marker means the model is not writing harmony


@dataclass(slots=True, frozen=True)
class Split:
    answer: str = ""
    reasoning: str = ""


class HarmonyParser:
    def __init__(self) -> None:
        self._pending = ""  # text not yet decided: a header, or a body's tail that may start a marker
        self._channel: str | None = None  # None: between messages, reading a header

    @property
    def in_answer(self) -> bool:
        return self._channel == ANSWER

    def feed(self, text: str) -> Split:
        self._pending += text
        answer, reasoning = [], []
        while self._pending:
            if self._channel is None:
                if not self._read_header():
                    break
                continue
            body, ended = self._read_body()
            (answer if self.in_answer else reasoning).append(body)
            if ended:
                self._channel = None
            else:
                break
        return Split("".join(answer), "".join(reasoning))

    def finish(self) -> Split:
        """The held-back tail at the end of the output: text, since no marker completed."""
        tail, self._pending = self._pending, ""
        if self._channel is None:
            return Split() if "<|" in tail else Split(tail)  # an unfinished header, or plain text
        return Split(tail, "") if self.in_answer else Split("", tail)

    def _read_header(self) -> bool:
        at = self._pending.find(MESSAGE)
        if at < 0:
            if len(self._pending) > _HEADER_LIMIT and "<|" not in self._pending:
                self._channel = ANSWER  # plain text after all: pass it through as the answer
                return True
            return False
        header, self._pending = self._pending[:at], self._pending[at + len(MESSAGE):]
        self._channel = _channel_of(header)
        return True

    def _read_body(self) -> tuple[str, bool]:
        """(text up to the next end marker, whether one was found); keeps a possible marker's start."""
        ends = [(at, marker) for marker in ENDS if (at := self._pending.find(marker)) >= 0]
        if ends:
            at, marker = min(ends)
            body, self._pending = self._pending[:at], self._pending[at + len(marker):]
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


async def split_channels(deltas: AsyncIterator[Delta]) -> AsyncIterator[Delta]:
    """An engine's deltas with the answer in `text` and the reasoning in `reasoning`. A delta's
    tokens count as reasoning unless it ends inside the final channel."""
    parser = HarmonyParser()
    async for delta in deltas:
        split = parser.feed(delta.text)
        if delta.finish_reason:
            rest = parser.finish()
            split = Split(split.answer + rest.answer, split.reasoning + rest.reasoning)
        reasoning_tokens = 0 if parser.in_answer and not split.reasoning else delta.num_tokens
        yield replace(delta, text=split.answer, reasoning=split.reasoning, reasoning_tokens=reasoning_tokens)
