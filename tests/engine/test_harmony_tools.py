"""The harmony parser reading gpt-oss tool calls, cut at every point, markers included."""

from __future__ import annotations

import json
import re

import pytest

from core.types import Delta, ToolCallDelta
from engine.harmony import HarmonyParser, split_channels

CALL_ID = re.compile(r"call_[0-9a-f]{24}")
THINK = "<|channel|>analysis<|message|>The user wants the weather; call the tool.<|end|>"
WEATHER = '{"city": "Oslo"}'
TIME = '{"zone": "Europe/Oslo", "precise": true}'


def call_message(name: str, body: str, channel: str = "commentary") -> str:
    return f"<|start|>assistant<|channel|>{channel} to=functions.{name} <|constrain|>json<|message|>{body}<|call|>"


def parse(pieces: list[str], tools: bool = True) -> tuple[str, str, list[tuple[str, str]], int]:
    """(answer, reasoning, [(name, arguments)], errors), checking the calls' shape on the way."""
    parser = HarmonyParser(tools=tools)
    answer, reasoning, deltas, errors = "", "", [], 0
    for part in [*map(parser.feed, pieces), parser.finish()]:
        assert "<|" not in part.answer + part.reasoning + "".join(c.arguments for c in part.calls)
        answer, reasoning, errors = answer + part.answer, reasoning + part.reasoning, errors + part.errors
        deltas += part.calls
    return answer, reasoning, calls_of(deltas), errors


def calls_of(deltas: list[ToolCallDelta]) -> list[tuple[str, str]]:
    """The calls the deltas make, in order; each opens with an id and name, at the next index."""
    calls: list[tuple[str, str]] = []
    for delta in deltas:
        if delta.id is not None:
            assert CALL_ID.fullmatch(delta.id) and delta.name and delta.index == len(calls), delta
            calls.append((delta.name, ""))
        else:
            assert delta.name is None and delta.index == len(calls) - 1, delta
            calls[-1] = (calls[-1][0], calls[-1][1] + delta.arguments)
    return calls


def every_cut(output: str, expected: tuple, tools: bool = True) -> None:
    for i in range(len(output) + 1):
        assert parse([output[:i], output[i:]], tools) == expected, i
    assert parse(list(output), tools) == expected


def test_a_call_after_thinking_at_every_cut():
    output = THINK + call_message("get_weather", WEATHER)
    every_cut(output, ("", "The user wants the weather; call the tool.", [("get_weather", WEATHER)], 0))


def test_two_calls_in_one_turn_back_to_back_or_restarted():
    restarted = THINK + call_message("get_weather", WEATHER) + call_message("get_time", TIME)
    back_to_back = restarted.replace("<|call|><|start|>assistant", "<|call|>")
    for output in (restarted, back_to_back):
        every_cut(
            output,
            ("", "The user wants the weather; call the tool.", [("get_weather", WEATHER), ("get_time", TIME)], 0),
        )


def test_a_call_on_the_analysis_channel():
    every_cut(call_message("get_weather", WEATHER, channel="analysis"), ("", "", [("get_weather", WEATHER)], 0))


def test_a_preamble_is_answer_text_then_the_call():
    output = (
        THINK
        + "<|start|>assistant<|channel|>commentary<|message|>Let me check the weather.<|end|>"
        + call_message("get_weather", WEATHER)
    )
    every_cut(
        output,
        ("Let me check the weather.", "The user wants the weather; call the tool.", [("get_weather", WEATHER)], 0),
    )


def test_the_recipient_before_the_channel():
    output = f"<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{WEATHER}<|call|>"
    every_cut(output, ("", "", [("get_weather", WEATHER)], 0))


def test_arguments_that_are_not_a_json_object_come_back_as_text():
    for body in ('{"city": "Os', "[1, 2]"):
        every_cut(call_message("get_weather", body), (body, "", [], 1))


def test_a_broken_call_does_not_take_the_next_ones_index():
    output = call_message("broken", "{nope") + call_message("get_time", TIME)
    every_cut(output, ("{nope", "", [("get_time", TIME)], 1))


def test_a_call_cut_off_by_the_end_of_output_is_read_at_finish():
    every_cut(
        f"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{WEATHER}",
        ("", "", [("get_weather", WEATHER)], 0),
    )


def test_a_recipient_outside_functions_is_not_a_call():
    output = '<|channel|>analysis to=browser.search <|constrain|>json<|message|>{"query": "oslo"}<|call|>'
    every_cut(output, ("", '{"query": "oslo"}', [], 0))


def test_without_tools_a_call_body_stays_reasoning():
    output = THINK + call_message("get_weather", WEATHER)
    every_cut(output, ("", "The user wants the weather; call the tool." + WEATHER, [], 0), tools=False)


def test_without_tools_a_preamble_stays_reasoning():
    output = "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>final<|message|>Hi"
    every_cut(output, ("Hi", "Checking.", [], 0), tools=False)
    every_cut(output, ("Checking.Hi", "", [], 0), tools=True)


def test_the_final_answer_still_comes_through_with_tools():
    output = THINK + "<|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>"
    every_cut(output, ("It is sunny.", "The user wants the weather; call the tool.", [], 0))


async def test_deltas_carry_calls_and_count_call_tokens_as_completion():
    pieces = [
        "<|channel|>",
        "analysis",
        "<|message|>",
        "Think",
        "<|end|>",
        "<|start|>",
        "assistant",
        "<|channel|>",
        "commentary to=functions.get_weather",
        " ",
        "<|constrain|>",
        "json",
        "<|message|>",
        '{"city":',
        ' "Oslo"}',
        "<|call|>",
        "<|start|>",
        "assistant",
        "<|channel|>",
        "commentary to=functions.bad",
        "<|message|>",
        "{x",
        "<|call|>",
    ]

    async def engine():
        for i, piece in enumerate(pieces):
            yield Delta(piece, 1, "stop" if i == len(pieces) - 1 else None)

    out = [d async for d in split_channels(engine(), tools=True)]
    assert len(out) == len(pieces) and out[-1].finish_reason == "stop"
    assert "".join(d.reasoning for d in out) == "Think" and "".join(d.text for d in out) == "{x"
    assert calls_of([c for d in out for c in d.tool_calls]) == [("get_weather", '{"city": "Oslo"}')]
    assert all(not d.tool_calls for d in out[:15]) and out[15].tool_calls  # held until <|call|>
    assert sum(d.tool_call_errors for d in out) == 1 and out[-1].tool_call_errors == 1
    # reasoning: the analysis message and the headers up to each call's <|message|> (5 + 7 + 4)
    assert sum(d.num_tokens for d in out) == 23 and sum(d.reasoning_tokens for d in out) == 16
    assert all(d.reasoning_tokens == 0 for d in out[12:16] + out[20:])


async def test_deltas_without_tools_keep_the_call_as_reasoning():
    async def engine():
        yield Delta(call_message("get_weather", WEATHER), 5, "stop")

    [delta] = [d async for d in split_channels(engine())]
    assert delta.reasoning == WEATHER and delta.text == "" and delta.tool_calls == () and delta.tool_call_errors == 0
    assert delta.reasoning_tokens == 5


@pytest.mark.parametrize("body", ["", "  "])
def test_an_empty_call_body_is_an_empty_object(body: str):
    answer, reasoning, calls, errors = parse([call_message("ping", body)])
    assert (answer, reasoning, errors) == ("", "", 0) and calls == [("ping", "{}")]
    assert json.loads(calls[0][1]) == {}
