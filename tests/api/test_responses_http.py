"""The Responses API with real clients against a live server on the simulator (plain and harmony):
the `openai` SDK's create, stream, retrieve, delete and input_items, a function-call loop both by
`previous_response_id` and by passing the items back, the store per caller and across a restart,
and every object and stream event checked against OpenAI's published schemas."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.api.test_openai_schema import check
from tests.api.test_tool_clients import run_weather_agent
from tests.conftest import LiveServer, live_server

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
KEYS = "server.keys=[{name: alice, key: sk-alice-0001}, {name: bob, key: sk-bob-00001}]"


@pytest.fixture(scope="module", params=["plain", "harmony"])
def server(request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    extra = ["engine.sim.harmony=true"] if request.param == "harmony" else []
    with live_server("engine.sim.natural_stop=true", *extra) as live:
        yield live


def post(live: LiveServer, key: str | None = None, **body) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(
        live.url + "/v1/responses", json={"model": "sim", "max_output_tokens": 300, **body}, headers=headers, timeout=30
    )


def test_a_response_is_a_response_object_with_real_usage(server: LiveServer) -> None:
    body = post(server, input="Hello there").json()
    check(body, "Response")
    assert body["id"].startswith("resp_") and body["status"] in ("completed", "incomplete")
    assert body["output"][-1]["type"] == "message" and body["output"][-1]["content"][0]["text"]
    usage = body["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    client = server.client()
    answer = client.responses.create(model="sim", input="Hello there", max_output_tokens=300)
    assert answer.output_text and answer.usage.output_tokens > 0


def test_every_stream_event_is_a_stream_event_in_order(server: LiveServer) -> None:
    lines = post(server, input="Tell me more", stream=True).text.splitlines()
    events = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    for event in events:
        check(event, "ResponseStreamEvent")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] in (
        "response.completed",
        "response.incomplete",
    )
    assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done") >= 1
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    final = events[-1]["response"]
    assert text and final["output"][-1]["content"][0]["text"] == text
    with server.client().responses.stream(model="sim", input="Tell me more", max_output_tokens=300) as stream:
        seen = list(stream)
    streamed = "".join(e.delta for e in seen if e.type == "response.output_text.delta")
    assert streamed and streamed == seen[-1].response.output_text


def test_a_function_call_loop_by_previous_response_id_and_by_items(server: LiveServer) -> None:
    client = server.client()
    raw = client.responses.with_raw_response.create(
        model="sim", input="What is the weather in Oslo?", tools=[WEATHER], max_output_tokens=300
    )
    check(json.loads(raw.text), "Response")
    first = raw.parse()
    calls = [o for o in first.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and "city" in json.loads(calls[0].arguments)
    result = {"type": "function_call_output", "call_id": calls[0].call_id, "output": "3 C and sunny"}
    chained = client.responses.create(
        model="sim", previous_response_id=first.id, input=[result], tools=[WEATHER], max_output_tokens=300
    )
    assert chained.output_text and not [o for o in chained.output if o.type == "function_call"]
    assert chained.usage.input_tokens > first.usage.input_tokens  # the history was read back
    passed_back = [
        {"role": "user", "content": "What is the weather in Oslo?"},
        *[o.model_dump(exclude_none=True) for o in first.output],
        result,
    ]
    stateless = client.responses.create(
        model="sim", input=passed_back, tools=[WEATHER], store=False, max_output_tokens=300
    )
    assert stateless.output_text and stateless.usage.input_tokens == chained.usage.input_tokens
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(stateless.id)  # store: false keeps nothing


def test_a_named_function_output_that_answers_no_call_is_read(server: LiveServer) -> None:
    """Codex adds its goal as a `function_call_output` with `name` and `namespace` and no `call_id`."""
    client = server.client()
    ask = {"role": "user", "content": "Say hello"}
    goal = {
        "type": "function_call_output",
        "name": "goal_objective",
        "namespace": "agent",
        "output": "write a long poem about the sea",
    }
    plain = client.responses.create(model="sim", input=[ask], store=False, max_output_tokens=20)
    told = client.responses.create(model="sim", input=[ask, goal], store=False, max_output_tokens=20)
    assert told.usage.input_tokens > plain.usage.input_tokens


def test_retrieve_input_items_and_delete(server: LiveServer) -> None:
    client = server.client()
    made = client.responses.create(
        model="sim",
        input=[{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        max_output_tokens=30,
    )
    got = client.responses.retrieve(made.id)
    assert got.id == made.id and got.output_text == made.output_text
    items = httpx.get(f"{server.url}/v1/responses/{made.id}/input_items", params={"order": "asc"}).json()
    check(items, "ResponseItemList")
    assert [i["role"] for i in items["data"]] == ["developer", "user"]
    listed = client.responses.input_items.list(made.id, order="desc", limit=1)
    assert [i.role for i in listed.data] == ["user"] and listed.has_more
    assert client.responses.delete(made.id) is None
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="sim", input="again", previous_response_id=made.id)


@pytest.mark.parametrize(
    "field, value, param",
    [
        ("background", True, "background"),  # with stream
        ("frobnicate", 1, "frobnicate"),
        ("input", [], "input"),
        ("include", ["file_search_call.results"], "include.0"),
        ("input", [{"type": "computer_call_output", "call_id": "x"}], "input.0.type"),
        ("input", [{"type": "function_call_output", "output": "x"}], "input.0.call_id"),
        ("tools", [{"type": "frob", "name": "apply"}], "tools.0.type"),
        (
            "tools",
            [{"type": "custom", "name": "apply", "format": {"type": "grammar", "syntax": "lark", "definition": "x"}}],
            "tools.0.format.type",
        ),
        ("tool_choice", "required", "tool_choice"),
    ],
)
def test_what_is_not_honoured_is_refused_by_name(server: LiveServer, field: str, value, param: str) -> None:
    response = post(server, **{"input": "hi", "stream": field == "background", field: value})
    assert response.status_code == 400, response.text
    check(response.json(), "ErrorResponse")
    assert response.json()["error"]["param"] == param


def test_hosted_tools_are_not_shown_and_are_named_in_a_header(server: LiveServer) -> None:
    tools = [WEATHER, {"type": "web_search"}, {"type": "namespace", "name": "codex_apps", "tools": []}]
    response = post(server, input="What is the weather in Oslo?", tools=tools)
    assert response.status_code == 200 and response.headers["x-unsupported-tools"] == "web_search, codex_apps"
    assert [t["name"] for t in response.json()["tools"]] == ["get_weather"]


def test_a_hosted_tools_name_that_no_header_can_carry_is_named_by_its_type(server: LiveServer) -> None:
    tools = [{"type": "web_search", "name": "x\u20ac"}, {"type": "mcp", "name": "a\nb"}, {"type": "file_search"}]
    response = post(server, input="hi", tools=tools)
    assert response.status_code == 200, response.text
    assert response.headers["x-unsupported-tools"] == "web_search, mcp, file_search"
    many = post(server, input="hi", tools=[{"type": "mcp", "name": f"t{i % 40}"} for i in range(2000)])
    assert many.headers["x-unsupported-tools"] == ", ".join(f"t{i}" for i in range(16))  # once each, 16 at most


def test_a_stored_response_is_its_callers_own_and_survives_a_restart(tmp_path) -> None:
    store = [KEYS, f"responses.path={tmp_path / 'responses.sqlite3'}"]
    with live_server(*store) as live:
        made = post(live, "sk-alice-0001", input="Remember me").json()
        assert (
            httpx.get(
                f"{live.url}/v1/responses/{made['id']}", headers={"Authorization": "Bearer sk-bob-00001"}
            ).status_code
            == 404
        )
        assert post(live, "sk-bob-00001", input="x", previous_response_id=made["id"]).status_code == 404
    with live_server(*store) as live:
        alice = {"Authorization": "Bearer sk-alice-0001"}
        assert httpx.get(f"{live.url}/v1/responses/{made['id']}", headers=alice).json()["output"] == made["output"]
        again = post(live, "sk-alice-0001", input="And now?", previous_response_id=made["id"]).json()
        assert again["status"] in ("completed", "incomplete")
        assert again["usage"]["input_tokens"] > made["usage"]["input_tokens"]


def test_past_the_bound_the_oldest_responses_go_first(tmp_path) -> None:
    with live_server(f"responses.path={tmp_path / 'r.sqlite3'}", "responses.max_responses=3") as live:
        ids = [post(live, input=f"number {i}", max_output_tokens=5).json()["id"] for i in range(5)]
        found = [httpx.get(f"{live.url}/v1/responses/{i}").status_code for i in ids]
    assert found == [404, 404, 200, 200, 200]


async def test_the_agents_sdks_default_model_runs_an_agent_with_a_function_tool(server: LiveServer) -> None:
    # past any answer's natural end: the SDK fails an incomplete response
    calls, result = await run_weather_agent(server.base_url, "OpenAIResponsesModel", 1000)
    assert len(calls) == 1 and isinstance(calls[0], str)
    assert isinstance(result.final_output, str) and result.final_output.strip()


def test_sealed_reasoning_carries_a_stateless_turn_and_cannot_be_forged(tmp_path) -> None:
    with live_server(
        KEYS, "engine.sim.harmony=true", "engine.sim.natural_stop=true", f"responses.path={tmp_path / 'r.sqlite3'}"
    ) as live:
        first = post(
            live,
            "sk-alice-0001",
            input="What is the weather in Oslo?",
            tools=[WEATHER],
            store=False,
            include=["reasoning.encrypted_content"],
        ).json()
        check(first, "Response")
        reasoning = [o for o in first["output"] if o["type"] == "reasoning"]
        assert reasoning and reasoning[0]["encrypted_content"]
        token = reasoning[0]["encrypted_content"]
        assert reasoning[0]["content"][0]["text"] not in token  # not readable
        call = next(o for o in first["output"] if o["type"] == "function_call")
        back = [
            {"role": "user", "content": "What is the weather in Oslo?"},
            {"type": "reasoning", "id": reasoning[0]["id"], "summary": [], "encrypted_content": token},
            call,
            {"type": "function_call_output", "call_id": call["call_id"], "output": "3 C"},
        ]
        shown = [
            {**item, "content": reasoning[0]["content"]} if item.get("type") == "reasoning" else item for item in back
        ]
        sealed = post(live, "sk-alice-0001", input=back, tools=[WEATHER], store=False).json()
        plain = post(live, "sk-alice-0001", input=shown, tools=[WEATHER], store=False).json()
        assert sealed["usage"]["input_tokens"] == plain["usage"]["input_tokens"]  # the reasoning was read back
        forged = [
            {**item, "encrypted_content": token[:-4] + "AAAA"} if item.get("type") == "reasoning" else item
            for item in back
        ]
        refused = post(live, "sk-alice-0001", input=forged, tools=[WEATHER], store=False)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "input.1.encrypted_content"
        assert post(live, "sk-bob-00001", input=back, tools=[WEATHER], store=False).status_code == 400


def test_background_returns_queued_then_polls_to_completion_and_cancels(tmp_path) -> None:
    import time

    with live_server(
        "engine.sim.token_latency_ms=20", "engine.sim.natural_stop=false", f"responses.path={tmp_path / 'r.sqlite3'}"
    ) as live:
        client = live.client()
        queued = client.responses.create(model="sim", input="Later, please", background=True, max_output_tokens=10)
        assert queued.status == "queued" and queued.background
        deadline = time.monotonic() + 20
        while (got := client.responses.retrieve(queued.id)).status in ("queued", "in_progress"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert got.status == "incomplete" and got.output_text and got.usage.output_tokens == 10
        raw = client.responses.with_raw_response.create(model="sim", input="x", background=True, max_output_tokens=2)
        assert raw.headers["x-priority"] == "low"  # the batch path, unless something names a class
        long = client.responses.create(model="sim", input="A long one", background=True, max_output_tokens=2000)
        cancelled = client.responses.cancel(long.id)
        assert cancelled.status == "cancelled" and client.responses.retrieve(long.id).status == "cancelled"
        assert live.wait_for(lambda s: s["running"] == 0 and s["waiting_total"] == 0)
        with pytest.raises(openai.BadRequestError):
            client.responses.cancel(client.responses.create(model="sim", input="x", max_output_tokens=2).id)


def test_a_background_response_unfinished_at_a_restart_is_failed_not_lost(tmp_path) -> None:
    store = f"responses.path={tmp_path / 'r.sqlite3'}"
    with live_server("engine.sim.token_latency_ms=50", "engine.sim.natural_stop=false", store) as live:
        rid = live.client().responses.create(model="sim", input="Slow", background=True, max_output_tokens=2000).id
    with live_server(store) as live:
        got = live.client().responses.retrieve(rid)
    assert got.status == "failed" and "send it again" in got.error.message


def test_a_custom_tool_is_called_with_free_text_streamed_too(server: LiveServer) -> None:
    patch = {"type": "custom", "name": "apply_patch", "description": "Apply a patch to the files"}
    body = post(server, input="Fix the typo", tools=[patch]).json()
    check(body, "Response")
    call = next(o for o in body["output"] if o["type"] == "custom_tool_call")
    assert call["name"] == "apply_patch" and isinstance(call["input"], str) and call["call_id"]
    result = {"type": "custom_tool_call_output", "call_id": call["call_id"], "output": "patched"}
    after = post(server, input=[result], previous_response_id=body["id"], tools=[patch]).json()
    assert after["output"][-1]["type"] == "message" and after["output"][-1]["content"][0]["text"]
    lines = post(server, input="Fix the typo", tools=[patch], stream=True).text.splitlines()
    events = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    for event in events:
        check(event, "ResponseStreamEvent")
    done = next(e for e in events if e["type"] == "response.custom_tool_call_input.done")
    final = next(o for o in events[-1]["response"]["output"] if o["type"] == "custom_tool_call")
    assert done["input"] == final["input"] and not any(e["type"].startswith("response.function_call") for e in events)
