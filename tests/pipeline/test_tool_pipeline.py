"""The pure parts of tools on the pipeline: the forced-call schema and its reader, the answer's
assembly of calls, and the cache key."""

from __future__ import annotations

import json

from jsonschema import Draft202012Validator

from cache.keys import KeyedRequest, make_key
from core.types import Delta, Tool, ToolCallDelta, ToolUse
from pipeline.answer import Answer
from pipeline.cache_path import CachePath
from pipeline.events import TextDelta, ToolCallPiece
from pipeline.forced_call import ForcedCallReader, forced_schema
from protocols.openai_chat.request import ChatCompletionRequest
from settings.schema import CacheConfig

CITY = Tool("get_weather", "", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
ZONE = Tool("get_time", "", {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]})


def read(use: ToolUse, text: str, finish: str = "stop") -> Delta:
    reader = ForcedCallReader(use)
    pieces = [text[i : i + 3] for i in range(0, len(text), 3)]
    for piece in pieces[:-1]:
        assert reader.feed(Delta(piece, 1)).text == ""  # held until the answer ends
    return reader.feed(Delta(pieces[-1], 1, finish))


def test_the_required_schema_admits_exactly_calls_to_the_tools():
    schema = Draft202012Validator(forced_schema(ToolUse((CITY, ZONE), "required")))
    assert schema.is_valid([{"name": "get_time", "arguments": {"zone": "UTC"}}])
    assert not schema.is_valid([]) and not schema.is_valid([{"name": "nope", "arguments": {}}])
    assert not schema.is_valid([{"name": "get_time", "arguments": {"city": "x"}}])
    single = Draft202012Validator(forced_schema(ToolUse((CITY, ZONE), "required", parallel=False)))
    assert not single.is_valid([{"name": "get_time", "arguments": {"zone": "a"}}] * 2)
    assert forced_schema(ToolUse((CITY, ZONE), "get_time")) == ZONE.parameters


def test_the_reader_turns_forced_json_into_calls():
    named = read(ToolUse((CITY, ZONE), "get_time"), '{"zone": "UTC"}')
    assert [(c.index, c.name, c.arguments) for c in named.tool_calls] == [
        (0, "get_time", ""),
        (0, None, '{"zone": "UTC"}'),
    ]
    both = read(
        ToolUse((CITY, ZONE), "required"),
        json.dumps(
            [{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_time", "arguments": {"zone": "CET"}}]
        ),
    )
    assert [c.name for c in both.tool_calls if c.name] == ["get_weather", "get_time"] and both.text == ""
    assert [c.index for c in both.tool_calls] == [0, 0, 1, 1]


def test_json_that_is_not_the_calls_goes_back_as_text_with_an_error():
    for use, text in (
        (ToolUse((CITY,), "required"), '[{"name": "get_weather", "argum'),
        (ToolUse((CITY,), "required"), '[{"name": "other", "arguments": {}}]'),
        (ToolUse((CITY,), "get_weather"), "[1, 2]"),
    ):
        out = read(use, text, "length")
        assert out.text == text and out.tool_call_errors == 1 and not out.tool_calls


def test_the_answer_assembles_calls_and_finishes_with_tool_calls():
    answer = Answer()
    events = answer.add(Delta("Let me look.", 2)) + answer.add(
        Delta(
            "",
            3,
            tool_calls=(
                ToolCallDelta(0, "call_a", "get_weather", ""),
                ToolCallDelta(0, arguments='{"city"'),
                ToolCallDelta(0, arguments=': "Oslo"}'),
            ),
        )
    )
    assert events[0] == TextDelta("Let me look.", None) and isinstance(events[1], ToolCallPiece)
    assert [(c.id, c.name, c.arguments) for c in answer.tool_calls] == [("call_a", "get_weather", '{"city": "Oslo"}')]
    assert answer.finish_reason("stop") == "tool_calls" and answer.finish_reason("length") == "length"
    assert Answer().finish_reason("stop") == "stop"


def test_one_call_per_turn_drops_a_second_call():
    answer = Answer(one_call=True)
    answer.add(Delta("", 1, tool_calls=(ToolCallDelta(0, "call_a", "f", "{}"), ToolCallDelta(1, "call_b", "g", "{}"))))
    assert [c.name for c in answer.tool_calls] == ["f"]


def test_logprobs_are_kept_for_the_answer_text_only():
    from core.types import TokenLogprob

    answer = Answer(with_logprobs=True)
    answer.add(Delta("", 1, reasoning="hm", logprobs=(TokenLogprob("<|channel|>", -0.1),)))
    answer.add(Delta("Hi", 1, logprobs=(TokenLogprob("Hi", -0.2),)))
    assert [t.token for t in answer.logprobs] == ["Hi"]


def test_tools_and_formats_change_the_cache_key_and_plain_requests_keep_theirs():
    path = CachePath(cache=object(), config=CacheConfig(mode="all"))  # the key is planned before any store is used
    base = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": CITY.parameters}}
    keys = [
        path.plan("m", ChatCompletionRequest.model_validate({**base, **extra}), "").key.digest
        for extra in (
            {},
            {"tools": [tool]},
            {"tools": [tool], "tool_choice": "required"},
            {"response_format": {"type": "json_object"}},
            {"presence_penalty": 1.0},
            {"metadata": {"a": "b"}},
        )
    ]
    assert len(set(keys[:5])) == 5 and keys[5] == keys[0]  # bookkeeping fields do not change the answer
    plain = make_key(KeyedRequest("m", (("user", "hi"),), None, 0.0, None, (), None, None), CacheConfig(mode="all"))
    assert keys[0] == plain.digest
    assert path.plan("m", ChatCompletionRequest.model_validate({**base, "logprobs": True}), "").key is None
