"""Tools and structured outputs on the real vLLM engine (CPU build, bundled SmolLM2, through our
ChatML tool template): a forced call and a json_schema answer are kept by vLLM's structured
outputs, so they parse and match their schemas even from a 135M model. Structure, never facts."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

pytestmark = pytest.mark.vllm

MODEL = "smollm2-135m-instruct"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "maxLength": 20}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_forced_call_parses_and_matches_the_schema(vllm_server, choice):
    reply = vllm_server.client().chat.completions.create(
        model=MODEL, messages=ASK, tools=[CLOCK, WEATHER], tool_choice=choice, max_tokens=80, temperature=0
    )
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "tool_calls", message
    calls = message.tool_calls
    assert calls and (choice == "required" or [c.function.name for c in calls] == ["get_weather"])
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in (CLOCK, WEATHER)}
    for call in calls:
        Draft202012Validator(tools[call.function.name]).validate(json.loads(call.function.arguments))


def test_a_json_schema_answer_parses_and_matches(vllm_server):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}, "population": {"type": "integer"}},
        "required": ["city", "population"],
        "additionalProperties": False,
    }
    reply = vllm_server.client().chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Name a big city and its population, as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}},
        max_tokens=60,
        temperature=0,
    )
    Draft202012Validator(schema).validate(json.loads(reply.choices[0].message.content))


def test_a_tool_loop_and_logprobs_run_on_the_engine(vllm_server):
    history = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees, sunny"},
    ]
    client = vllm_server.client()
    reply = client.chat.completions.create(
        model=MODEL,
        messages=history,
        tools=[WEATHER],
        tool_choice="none",
        max_tokens=12,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    assert reply.choices[0].message.content and not reply.choices[0].message.tool_calls
    entries = reply.choices[0].logprobs.content
    assert len(entries) == reply.usage.completion_tokens
    assert "".join(e.token for e in entries) == reply.choices[0].message.content
    assert all(len(e.top_logprobs) == 2 and e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob for e in entries)


def test_strict_tools_in_auto_mode_run_under_a_structural_tag(vllm_server):
    strict = {"type": "function", "function": {**WEATHER["function"], "strict": True}}
    reply = vllm_server.client().chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": "Always call a tool."}, *ASK],
        tools=[strict],
        max_tokens=60,
        temperature=0,
    )
    for call in reply.choices[0].message.tool_calls or ():
        Draft202012Validator(WEATHER["function"]["parameters"]).validate(json.loads(call.function.arguments))
    assert reply.choices[0].finish_reason in ("tool_calls", "stop", "length")
