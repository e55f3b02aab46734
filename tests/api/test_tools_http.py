"""Tools, structured outputs and the rest of OpenAI's request fields over HTTP, on the simulator:
nothing silently ignored, answers in OpenAI's published shapes, tools in the cache key and the
prompt's tokens, and a gateway passing them to the server behind it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from jsonschema import Draft202012Validator

from tests.api.test_openai_schema import check
from tests.conftest import LiveServer, live_server

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Oslo?"}]


def chat(live: LiveServer, **body) -> httpx.Response:
    request = {"model": "sim", "messages": ASK, "max_tokens": 300, **body}
    return httpx.post(
        live.url + "/v1/chat/completions", json=request, headers=body.pop("headers", None) or {}, timeout=30
    )


def stream_chunks(live: LiveServer, **body) -> list[dict]:
    lines = chat(live, stream=True, **body).text.splitlines()
    return [json.loads(line[6:]) for line in lines if line.startswith("data: {")]


def valid_arguments(call: dict, tool: dict = WEATHER) -> dict:
    arguments = json.loads(call["function"]["arguments"])
    Draft202012Validator(tool["function"]["parameters"]).validate(arguments)
    return arguments


@pytest.fixture(scope="module", params=["plain", "harmony"])
def server(request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    extra = ["engine.sim.harmony=true", "engine.sim.natural_stop=true"] if request.param == "harmony" else []
    with live_server(*extra) as live:
        yield live


@pytest.mark.parametrize("choice", ["auto", "required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_tool_call_is_a_create_chat_completion_response(server: LiveServer, choice) -> None:
    body = chat(server, tools=[WEATHER], tool_choice=choice).json()
    check(body, "CreateChatCompletionResponse")
    choice0 = body["choices"][0]
    assert choice0["finish_reason"] == "tool_calls"
    assert choice0["message"]["content"] is None
    for call in choice0["message"]["tool_calls"]:
        assert (
            call["type"] == "function" and call["id"].startswith("call_") and call["function"]["name"] == "get_weather"
        )
        valid_arguments(call)


def test_every_tool_call_chunk_is_a_stream_response(server: LiveServer) -> None:
    chunks = stream_chunks(server, tools=[WEATHER], stream_options={"include_usage": True})
    for chunk in chunks:
        check(chunk, "CreateChatCompletionStreamResponse")
    pieces = [
        c["choices"][0]["delta"]["tool_calls"][0]
        for c in chunks
        if c["choices"] and c["choices"][0]["delta"].get("tool_calls")
    ]
    assert pieces[0]["id"].startswith("call_") and pieces[0]["function"] == {"name": "get_weather", "arguments": ""}
    assert all("id" not in p and "name" not in p["function"] for p in pieces[1:])
    valid_arguments({"function": {"arguments": "".join(p["function"]["arguments"] for p in pieces)}})
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"
    assert chunks[-1]["usage"]["completion_tokens"] > 0


def test_tool_choice_none_gives_text_and_the_rendered_tools_are_prompt_tokens(server: LiveServer) -> None:
    plain = chat(server).json()
    none = chat(server, tools=[WEATHER], tool_choice="none").json()
    called = chat(server, tools=[WEATHER]).json()
    assert "tool_calls" not in none["choices"][0]["message"] and none["choices"][0]["message"]["content"]
    assert none["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"]  # "none" leaves the tools out
    assert called["usage"]["prompt_tokens"] > plain["usage"]["prompt_tokens"] + 10


def test_json_schema_and_json_object_answers_parse(server: LiveServer) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}
    body = chat(server, response_format=fmt).json()
    Draft202012Validator(schema).validate(json.loads(body["choices"][0]["message"]["content"]))
    body = chat(server, response_format={"type": "json_object"}).json()
    assert isinstance(json.loads(body["choices"][0]["message"]["content"]), dict)


def test_logprobs_come_in_openai_shape_streamed_too(server: LiveServer) -> None:
    body = chat(
        server, messages=[{"role": "user", "content": "hi"}], logprobs=True, top_logprobs=3, max_tokens=400
    ).json()
    check(body, "CreateChatCompletionResponse")
    entries = body["choices"][0]["logprobs"]["content"]
    assert entries and "".join(e["token"] for e in entries) == body["choices"][0]["message"]["content"]
    assert all(len(e["top_logprobs"]) == 3 and e["logprob"] <= 0 for e in entries)
    chunks = stream_chunks(server, logprobs=True, top_logprobs=1, max_tokens=400)
    streamed = [
        e
        for c in chunks
        if c["choices"] and c["choices"][0]["logprobs"]
        for e in c["choices"][0]["logprobs"]["content"]
    ]
    assert streamed and all(len(e["top_logprobs"]) == 1 for e in streamed)
    assert chat(server, logprobs=False).json()["choices"][0]["logprobs"] is None


@pytest.mark.parametrize(
    "field, value, code",
    [
        ("audio", {"voice": "alloy", "format": "wav"}, "unsupported_parameter"),
        ("functions", [{"name": "f"}], "unsupported_parameter"),
        ("prediction", {"type": "content", "content": "x"}, "unsupported_parameter"),
        ("frobnicate", 1, "unsupported_parameter"),
        ("messages", [{"role": "user", "content": "hi", "frobnicate": 1}], "unsupported_parameter"),
        ("tools", [{"type": "function", "function": {"name": "f", "frobnicate": 1}}], "unsupported_parameter"),
        ("response_format", {"type": "json_object", "frobnicate": 1}, "unsupported_parameter"),
        ("stream_options", {"include_usage": True, "frobnicate": 1}, "unsupported_parameter"),
        ("modalities", ["text", "audio"], "invalid_value"),
        ("top_logprobs", 2, "invalid_value"),  # without logprobs: true
        ("tool_choice", "required", "invalid_value"),  # without tools
        ("tool_choice", {"type": "function", "function": {"name": "nope"}}, "invalid_value"),
        ("tools", [{"type": "function", "function": {"name": "f", "parameters": {"type": "objekt"}}}], "invalid_value"),
        ("tools", [WEATHER, WEATHER], "invalid_value"),
        (
            "response_format",
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 3}}},
            "invalid_value",
        ),
        ("logit_bias", {"hello": 1}, "invalid_value"),
        ("logit_bias", {"5": 101}, "invalid_value"),
    ],
)
def test_fields_not_honoured_are_400_naming_them(server: LiveServer, field: str, value, code: str) -> None:
    response = chat(server, **{field: value})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    check(response.json(), "ErrorResponse")
    assert error["code"] == code and error["param"].split(".")[0] == field, error


def test_bookkeeping_fields_and_vllm_sampling_extensions_are_taken(server: LiveServer) -> None:
    response = chat(
        server,
        metadata={"team": "a"},
        store=False,
        prompt_cache_key="k",
        safety_identifier="u1",
        service_tier="auto",
        user="me",
        modalities=["text"],
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        logit_bias={"5": -100},
        top_k=20,
        min_p=0.05,
        repetition_penalty=1.1,
        min_tokens=2,
        ignore_eos=False,
        stop_token_ids=[7],
        chat_template_kwargs={"x": 1},
    )
    assert response.status_code == 200, response.text


def test_the_tool_loop_history_is_taken(server: LiveServer) -> None:
    history = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "I should look it up",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "3 C, rain"}]},
    ]
    body = chat(server, messages=history, tools=[WEATHER]).json()
    assert "tool_calls" not in body["choices"][0]["message"]
    assert body["choices"][0]["finish_reason"] in ("stop", "length")
    missing = chat(server, messages=[*ASK, {"role": "tool", "content": "3 C"}])
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "messages.1"
    empty = chat(server, messages=[*ASK, {"role": "assistant", "content": None}])
    assert empty.status_code == 400


def test_a_call_cut_by_max_tokens_comes_back_as_text_and_is_counted() -> None:
    with live_server() as live:
        body = chat(live, tools=[WEATHER], tool_choice="required", max_tokens=3).json()
        assert body["choices"][0]["finish_reason"] == "length" and body["choices"][0]["message"]["content"]
        assert "tool_calls" not in body["choices"][0]["message"]
        chat(live, tools=[WEATHER])
        metrics = httpx.get(live.url + "/metrics", timeout=10).text
    assert "gptoss_tool_call_parse_errors_total 1.0" in metrics and "gptoss_tool_calls_total 1.0" in metrics


def test_tools_are_part_of_the_cache_key_and_calls_replay(tmp_path) -> None:
    with live_server("cache.enabled=true", f"cache.path={tmp_path / 'cache.db'}") as live:
        without = chat(live, temperature=0)
        first = chat(live, temperature=0, tools=[WEATHER])
        again = chat(live, temperature=0, tools=[WEATHER])
        named = chat(
            live, temperature=0, tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}}
        )
        streamed = stream_chunks(live, temperature=0, tools=[WEATHER])
    assert without.headers["x-cache"] == "MISS" and "tool_calls" not in without.json()["choices"][0]["message"]
    assert first.headers["x-cache"] == "MISS" and named.headers["x-cache"] == "MISS"
    assert again.headers["x-cache"] == "HIT"
    assert again.json()["choices"][0]["message"]["tool_calls"] == first.json()["choices"][0]["message"]["tool_calls"]
    assert again.json()["choices"][0]["finish_reason"] == "tool_calls"
    pieces = [
        c["choices"][0]["delta"]["tool_calls"][0]
        for c in streamed
        if c["choices"] and c["choices"][0]["delta"].get("tool_calls")
    ]
    assert pieces[0]["id"] == first.json()["choices"][0]["message"]["tool_calls"][0]["id"]


def test_a_gateway_passes_tools_to_the_server_behind_it() -> None:
    with (
        live_server() as upstream,
        live_server(
            "engine.backend=openai",
            f"engine.openai.upstreams=[{upstream.base_url}]",
            "engine.openai.health_interval_s=0.2",
        ) as gateway,
    ):
        auto = chat(gateway, tools=[WEATHER]).json()
        named = chat(gateway, tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}})
        chunks = stream_chunks(gateway, tools=[WEATHER])
        fmt = {
            "type": "json_schema",
            "json_schema": {
                "name": "n",
                "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
            },
        }
        structured = chat(gateway, response_format=fmt).json()
        history = chat(
            gateway,
            messages=[
                *ASK,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "3 C"},
            ],
            tools=[WEATHER],
        ).json()
    assert auto["choices"][0]["finish_reason"] == "tool_calls"
    valid_arguments(auto["choices"][0]["message"]["tool_calls"][0])
    assert named.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    pieces = [
        c["choices"][0]["delta"]["tool_calls"][0]
        for c in chunks
        if c["choices"] and c["choices"][0]["delta"].get("tool_calls")
    ]
    assert pieces[0]["function"]["name"] == "get_weather"
    assert isinstance(json.loads(structured["choices"][0]["message"]["content"])["n"], int)
    assert "tool_calls" not in history["choices"][0]["message"]
