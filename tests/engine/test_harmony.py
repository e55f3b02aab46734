"""The harmony parser on synthetic gpt-oss output, cut at every point, markers included."""

from __future__ import annotations

import pytest

from core.types import Delta
from engine.harmony import HarmonyParser, split_channels

THINKING = "The user greets us. We should answer briefly, <b>politely</b> & kindly."
ANSWER = "Hello! How can I help you today?"
OUTPUT = (
    f"<|channel|>analysis<|message|>{THINKING}<|end|><|start|>assistant<|channel|>final<|message|>{ANSWER}<|return|>"
)


def parse(pieces: list[str]) -> tuple[str, str]:
    parser = HarmonyParser()
    answer, reasoning = "", ""
    for piece in pieces:
        split = parser.feed(piece)
        assert "<|" not in split.answer + split.reasoning
        answer, reasoning = answer + split.answer, reasoning + split.reasoning
    rest = parser.finish()
    return answer + rest.answer, reasoning + rest.reasoning


def test_every_single_cut_gives_the_two_texts_exactly():
    for i in range(len(OUTPUT) + 1):
        assert parse([OUTPUT[:i], OUTPUT[i:]]) == (ANSWER, THINKING), i


def test_every_double_cut_and_character_by_character():
    n = len(OUTPUT)
    for i in range(0, n + 1, 3):
        for j in range(i, n + 1, 2):
            assert parse([OUTPUT[:i], OUTPUT[i:j], OUTPUT[j:]]) == (ANSWER, THINKING), (i, j)
    assert parse(list(OUTPUT)) == (ANSWER, THINKING)


def test_markers_never_leak_while_streaming():
    parser = HarmonyParser()
    shown = ""
    for ch in OUTPUT:
        split = parser.feed(ch)
        shown += split.answer + split.reasoning
        assert "<|" not in shown and "|>" not in shown, shown
    assert shown == THINKING + ANSWER


@pytest.mark.parametrize(
    "output, answer, reasoning",
    [
        # a tool-call preamble on commentary, with a constrained format, counts as reasoning
        (
            '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}<|call|>',
            "",
            '{"city": "Oslo"}',
        ),
        # the length limit cut the thinking short: what came is reasoning, no answer
        ("<|channel|>analysis<|message|>Let me think about", "", "Let me think about"),
        # an end of output without <|return|> (vLLM may drop the stop token's text)
        ("<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>b", "b", "a"),
        # no channel given: the final answer
        ("<|start|>assistant<|message|>plain", "plain", ""),
        # text that is not harmony at all comes through as the answer
        ("Just an answer, no markers.", "Just an answer, no markers.", ""),
    ],
)
def test_other_shapes(output, answer, reasoning):
    for i in range(len(output) + 1):
        assert parse([output[:i], output[i:]]) == (answer, reasoning), i


async def test_deltas_carry_the_answer_and_the_reasoning_with_their_tokens():
    pieces = [
        "<|channel|>",
        "analysis",
        "<|message|>",
        "Think",
        " hard",
        "<|end|>",
        "<|start|>",
        "assistant",
        "<|channel|>",
        "final",
        "<|message|>",
        "Hi",
        " there",
        "<|return|>",
    ]

    async def engine():
        for i, piece in enumerate(pieces):
            yield Delta(piece, 1, "stop" if i == len(pieces) - 1 else None)

    out = [d async for d in split_channels(engine())]
    assert "".join(d.text for d in out) == "Hi there" and "".join(d.reasoning for d in out) == "Think hard"
    assert sum(d.num_tokens for d in out) == 14 and sum(d.reasoning_tokens for d in out) == 11
    assert out[-1].finish_reason == "stop"
