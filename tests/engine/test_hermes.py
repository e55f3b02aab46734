"""The `<tool_call>` parser on synthetic Hermes / Qwen output, cut at every point, tags included."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from core.types import Delta, ToolCallDelta
from engine.hermes import ToolCallParser, split_tool_calls
from engine.tool_output import Parsed

ID = re.compile(r"call_[0-9a-f]{24}")
WEATHER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "days": 3}}\n</tool_call>'
TIME = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "Europe/Oslo"}}\n</tool_call>'


def parse(pieces: list[str]) -> Parsed:
    parser = ToolCallParser()
    out = Parsed()
    for piece in pieces:
        out += parser.feed(piece)
    return out + parser.finish()


def calls(deltas: tuple[ToolCallDelta, ...]) -> list[tuple[str, dict[str, Any]]]:
    """(name, parsed arguments) per index; checks the OpenAI shape: id and name first, then text."""
    by_index: dict[int, list[ToolCallDelta]] = {}
    for delta in deltas:
        by_index.setdefault(delta.index, []).append(delta)
    assert sorted(by_index) == list(range(len(by_index)))
    found = []
    for pieces in by_index.values():
        first, rest = pieces[0], pieces[1:]
        assert first.id and ID.fullmatch(first.id) and first.name
        assert all(p.id is None and p.name is None for p in rest)
        found.append((first.name, json.loads("".join(p.arguments for p in pieces))))
    return found


def every_cut(text: str) -> list[list[str]]:
    return [[text[:i], text[i:]] for i in range(len(text) + 1)] + [list(text)]


def test_plain_text_passes_through_unchanged_at_every_cut():
    text = "Use a < b and <tools> or <tool_ca, then </tool_call> is just text.\n\n"
    for pieces in every_cut(text):
        out = parse(pieces)
        assert (out.answer, out.calls, out.errors) == (text, (), 0), pieces


def test_one_call_at_every_cut_gives_the_same_call_and_no_tag_text():
    for pieces in every_cut(WEATHER):
        out = parse(pieces)
        assert "<tool" not in out.answer and out.answer == "" and out.errors == 0, pieces
        assert calls(out.calls) == [("get_weather", {"city": "Zürich", "days": 3})], pieces
    assert "Zürich" in "".join(d.arguments for d in parse([WEATHER]).calls)  # ensure_ascii=False


def test_two_calls_with_newlines_between_and_after():
    text = WEATHER + "\n\n" + TIME + "\n"
    for pieces in every_cut(text):
        out = parse(pieces)
        assert out.answer == "" and out.errors == 0, pieces
        assert calls(out.calls) == [
            ("get_weather", {"city": "Zürich", "days": 3}),
            ("get_time", {"tz": "Europe/Oslo"}),
        ], pieces


def test_text_then_a_call_then_text():
    text = "Let me check the weather.\n" + WEATHER + "\n\nDone."
    for pieces in every_cut(text):
        out = parse(pieces)
        assert out.answer == "Let me check the weather.Done." and out.errors == 0, pieces
        assert [name for name, _ in calls(out.calls)] == ["get_weather"]


def test_arguments_as_a_string_as_parameters_or_missing():
    text = (
        '<tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call>'
        '<tool_call>{"name": "b", "parameters": {"y": [2]}}</tool_call>'
        '<tool_call>{"name": "c"}</tool_call>'
    )
    out = parse([text])
    assert out.answer == "" and out.errors == 0
    assert calls(out.calls) == [("a", {"x": 1}), ("b", {"y": [2]}), ("c", {})]


def test_malformed_call_goes_back_as_text_with_an_error():
    bad = '<tool_call>\n{"name": "get_weather", "arguments": {"city": \n</tool_call>'
    for text in (
        bad,
        '<tool_call>{"arguments": {}}</tool_call>',
        "<tool_call>[1]</tool_call>",
        '<tool_call>{"name": "f", "arguments": [1]}</tool_call>',
    ):
        for pieces in every_cut("Hi\n" + text):
            out = parse(pieces)
            assert (out.answer, out.calls, out.errors) == ("Hi\n" + text, (), 1), pieces


def test_a_good_call_after_a_bad_one_keeps_its_index():
    out = parse(["<tool_call>nope</tool_call>\n" + TIME])
    assert out.answer == "<tool_call>nope</tool_call>" and out.errors == 1
    assert [(d.index, d.name) for d in out.calls if d.name] == [(0, "get_time")]


def test_unterminated_call_at_finish():
    for text in (WEATHER[: -len("</tool_call>")], WEATHER[: -len("call>")]):
        for pieces in every_cut(text):
            out = parse(pieces)
            assert out.answer == "" and out.errors == 0, pieces
            assert calls(out.calls) == [("get_weather", {"city": "Zürich", "days": 3})], pieces
    cut = WEATHER[:40]
    out = parse(["ok ", cut])
    assert (out.answer, out.calls, out.errors) == ("ok " + cut, (), 1)


async def test_split_tool_calls_keeps_the_other_fields():
    async def stream() -> AsyncIterator[Delta]:
        yield Delta("Checking.\n<tool", 3, cached_tokens=5)
        yield Delta(WEATHER[len("<tool") :], 20, reasoning="r")
        yield Delta("\n<tool_call>{bad}", 4)
        yield Delta("", 1, finish_reason="stop")

    out = [d async for d in split_tool_calls(stream())]
    assert [d.text for d in out] == ["Checking.", "", "", "<tool_call>{bad}"]
    assert [d.num_tokens for d in out] == [3, 20, 4, 1]
    assert [d.finish_reason for d in out] == [None, None, None, "stop"]
    assert (out[0].cached_tokens, out[1].reasoning) == (5, "r")
    assert calls(out[1].tool_calls) == [("get_weather", {"city": "Zürich", "days": 3})]
    assert [d.tool_call_errors for d in out] == [0, 0, 0, 1]
