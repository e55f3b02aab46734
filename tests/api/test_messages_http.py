"""Anthropic's Messages API through the official `anthropic` SDK against a live server on the
simulator (plain and harmony): create, stream (every event parsed into the SDK's own types), a
tool loop, tool_choice, thinking round-tripped by its signature, count_tokens, models.list, errors
in Anthropic's shape (a 429 and a 529 the SDK recognises), and the pipeline's rules (keys,
priority, limits) exactly as on chat."""

from __future__ import annotations

import threading
import time

import anthropic
import httpx
import pytest
from anthropic.types import RawMessageStreamEvent
from pydantic import TypeAdapter

from tests.api.team import KEYS, live  # noqa: F401 - live: the module's server fixture
from tests.conftest import LiveServer, live_server

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
}
_EVENT: TypeAdapter[RawMessageStreamEvent] = TypeAdapter(RawMessageStreamEvent)  # the SDK's own event types
CLOCK = {
    "name": "get_time",
    "description": "The time in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def client(live: LiveServer, key: str = "sk-alice-0001") -> anthropic.Anthropic:
    api = anthropic.Anthropic(base_url=live.url, api_key=key, max_retries=0)
    live.clients.append(api)  # closed with the server
    return api


def test_create_answers_a_message(live: LiveServer) -> None:
    message = client(live).messages.create(model="sim", max_tokens=400, messages=user("Say hello."))
    assert message.id.startswith("msg_") and message.role == "assistant" and message.model == "sim"
    assert message.stop_reason in ("end_turn", "max_tokens") and message.content[-1].type == "text"
    assert message.content[-1].text and message.usage.output_tokens > 0 and message.usage.input_tokens > 0


def test_the_stream_is_anthropics_event_for_event(live: LiveServer) -> None:
    with httpx.stream(
        "POST",
        live.url + "/v1/messages?beta=true",
        timeout=30,
        headers={"x-api-key": "sk-alice-0001", "anthropic-version": "2023-06-01"},
        json={
            "model": "sim",
            "max_tokens": 40,
            "stream": True,
            "messages": user("Tell me more."),
            "thinking": {"type": "adaptive"},
            "metadata": {"user_id": "u1"},
        },
    ) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        names, events = [], []
        for line in response.iter_lines():
            if line.startswith("event: "):
                names.append(line[7:])
            elif line.startswith("data: "):
                events.append(_EVENT.validate_json(line[6:]))
    kinds = [e.type for e in events]
    assert kinds == names and kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    starts = [e for e in events if e.type == "content_block_start"]
    assert [e.index for e in starts] == list(range(len(starts))) and starts
    assert kinds.count("content_block_stop") == len(starts)
    if live.services.config.engine.sim.harmony:  # thinking first, closed by its signature
        assert starts[0].content_block.type == "thinking"
        deltas = [e.delta.type for e in events if e.type == "content_block_delta" and e.index == 0]
        assert set(deltas) == {"thinking_delta", "signature_delta"} and deltas[-1] == "signature_delta"
    assert events[-2].delta.stop_reason in ("end_turn", "max_tokens") and events[-2].usage.output_tokens > 0


def test_a_tool_loop_ends_in_text(live: LiveServer) -> None:
    api = client(live)
    asked = api.messages.create(
        model="sim",
        max_tokens=300,
        tools=[WEATHER],
        tool_choice={"type": "any"},
        messages=user("What is the weather in Paris?"),
    )
    call = asked.content[-1]
    assert asked.stop_reason == "tool_use" and call.type == "tool_use" and call.id.startswith("toolu_")
    assert call.name == "get_weather" and isinstance(call.input["city"], str) and isinstance(call.input["days"], int)
    history = [
        *user("What is the weather in Paris?"),
        {"role": "assistant", "content": asked.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]},
    ]
    answered = api.messages.create(model="sim", max_tokens=400, tools=[WEATHER], messages=history)
    assert answered.stop_reason in ("end_turn", "max_tokens") and answered.content[-1].type == "text"


@pytest.mark.parametrize(
    "choice, called", [({"type": "tool", "name": "get_time"}, "get_time"), ({"type": "none"}, None)]
)
def test_tool_choice_tool_and_none(live: LiveServer, choice: dict, called: str | None) -> None:
    message = client(live).messages.create(
        model="sim", max_tokens=200, tools=[WEATHER, CLOCK], tool_choice=choice, messages=user("Help me.")
    )
    uses = [b.name for b in message.content if b.type == "tool_use"]
    assert uses == ([called] if called else [])


def test_thinking_comes_back_by_its_signature_and_only_for_its_caller(live: LiveServer) -> None:
    if not live.services.config.engine.sim.harmony:
        pytest.skip("the plain simulator writes no reasoning")
    first = client(live).messages.create(
        model="sim", max_tokens=60, thinking={"type": "enabled", "budget_tokens": 2048}, messages=user("Think first.")
    )
    thinking = next(b for b in first.content if b.type == "thinking")
    assert thinking.thinking and thinking.signature
    turn = [*user("Think first."), {"role": "assistant", "content": first.content}, *user("And then?")]
    assert client(live).messages.create(model="sim", max_tokens=20, messages=turn).content
    for key, forged in (("sk-bob-00001", thinking.signature), ("sk-alice-0001", thinking.signature[:-8] + "AAAAAAAA")):
        bad = [
            *turn[:1],
            {
                "role": "assistant",
                "content": [{"type": "thinking", "thinking": thinking.thinking, "signature": forged}],
            },
            *turn[2:],
        ]
        with pytest.raises(anthropic.BadRequestError) as err:
            client(live, key).messages.create(model="sim", max_tokens=20, messages=bad)
        assert err.value.body["error"]["type"] == "invalid_request_error" and "signature" in str(err.value)


def test_count_tokens_is_the_usage_of_the_same_request(live: LiveServer) -> None:
    api = client(live)
    counted = api.messages.count_tokens(model="sim", messages=user("Count me."), tools=[WEATHER])
    used = api.messages.create(model="sim", max_tokens=300, messages=user("Count me."), tools=[WEATHER])
    assert counted.input_tokens > 0
    assert counted.input_tokens == used.usage.input_tokens + (used.usage.cache_read_input_tokens or 0)


def test_models_list_in_anthropics_shape(live: LiveServer) -> None:
    models = client(live).models.list()
    assert [m.id for m in models.data] == ["sim"] and models.data[0].type == "model" and not models.has_more
    plain = httpx.get(live.url + "/v1/models", headers={"Authorization": "Bearer sk-alice-0001"}).json()
    assert plain["object"] == "list"  # OpenAI's shape without anthropic-version


@pytest.mark.parametrize(
    "body, param",
    [
        (
            {"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "x"}}]}]},
            "messages.0.content.0",
        ),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type"),
        ({"frobnicate": 1}, "frobnicate"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stop_sequences": ["zq"] * 17}, "stop_sequences"),
        ({"tool_choice": {"type": "tool", "name": "nope"}, "tools": [WEATHER]}, "tool_choice"),
        ({"tool_choice": {"type": "any"}}, "tool_choice"),  # a required call needs tools
        (
            {"messages": [{"role": "user", "content": [{"type": "thinking", "thinking": "x", "signature": "y"}]}]},
            "messages.0.content.0",
        ),  # a block only the assistant writes
        (
            {
                "messages": [
                    *user("hi"),
                    {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]},
                ]
            },
            "messages.1.content.0",
        ),
    ],
)
def test_bad_requests_are_anthropic_errors_naming_the_field(live: LiveServer, body: dict, param: str) -> None:
    sent = {"model": "sim", "max_tokens": 10, "messages": user("hi"), **body}
    response = httpx.post(live.url + "/v1/messages", json=sent, headers={"x-api-key": "sk-alice-0001"})
    assert response.status_code == 400, response.text
    assert response.json()["type"] == "error" and response.json()["error"]["type"] == "invalid_request_error"
    assert param in response.json()["error"]["message"]


def test_the_accepted_service_fields_change_nothing(live: LiveServer) -> None:
    sent = {
        "model": "sim",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}
        ],
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "thinking": {"type": "adaptive", "display": "omitted"},
        "tools": [{**WEATHER, "defer_loading": True}],
        "tool_choice": {"type": "none"},
        "service_tier": "auto",
    }
    response = httpx.post(
        live.url + "/v1/messages",
        json=sent,
        headers={"x-api-key": "sk-alice-0001", "anthropic-beta": "claude-code-20250219"},
    )
    assert response.status_code == 200, response.text


def test_a_callers_limit_is_a_429_and_capacity_a_529(live: LiveServer) -> None:
    slow = client(live, "sk-slow-0001")
    slow.messages.create(model="sim", max_tokens=3, messages=user("one"))
    with pytest.raises(anthropic.RateLimitError) as limited:
        slow.messages.create(model="sim", max_tokens=3, messages=user("two"))
    assert limited.value.body["error"]["type"] == "rate_limit_error"
    assert int(limited.value.response.headers["retry-after"]) >= 1
    assert "anthropic-ratelimit-requests-limit" in limited.value.response.headers


def test_count_tokens_is_held_to_the_keys_rpm(live: LiveServer) -> None:
    slow = client(live, "sk-slow-0001")
    assert slow.messages.count_tokens(model="sim", messages=user("one")).input_tokens > 0
    with pytest.raises(anthropic.RateLimitError) as limited:
        slow.messages.count_tokens(model="sim", messages=user("two"))
    assert limited.value.body["error"]["type"] == "rate_limit_error"
    assert "1 token counts per minute" in limited.value.body["error"]["message"]


def test_the_door_refuses_for_capacity_with_a_529() -> None:
    with live_server(
        "scheduler.max_concurrency=1", "scheduler.max_queue_size=1", "engine.sim.token_latency_ms=20"
    ) as live:
        api = client(live, "any")
        hold = threading.Thread(target=lambda: api.messages.create(model="sim", max_tokens=200, messages=user("a")))
        wait = threading.Thread(target=lambda: api.messages.create(model="sim", max_tokens=5, messages=user("b")))
        hold.start()
        live.wait_for(lambda s: s["running"] == 1)
        wait.start()
        live.wait_for(lambda s: s["waiting_total"] == 1)
        with pytest.raises(anthropic.OverloadedError) as full:
            api.messages.create(model="sim", max_tokens=5, messages=user("c"))
        hold.join(30)
        wait.join(30)
    assert full.value.status_code == 529 and full.value.body["error"]["type"] == "overloaded_error"
    assert int(full.value.response.headers["retry-after"]) >= 1  # the SDK waits this long before it tries again


def test_keys_and_classes_apply_as_on_chat(live: LiveServer) -> None:
    with pytest.raises(anthropic.AuthenticationError) as err:
        client(live, "sk-unknown-01").messages.create(model="sim", max_tokens=3, messages=user("x"))
    assert err.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid or missing API key"},
    }
    bearer = httpx.post(
        live.url + "/v1/messages",
        json={"model": "sim", "max_tokens": 3, "messages": user("x")},
        headers={"Authorization": "Bearer sk-bob-00001", "X-Priority": "low"},
    )
    assert bearer.status_code == 200 and bearer.headers["x-priority"] == "low"
    before = live.services.pipeline.usage.report(0, 2**40)["bob"].requests
    client(live, "sk-bob-00001").messages.create(model="sim", max_tokens=3, messages=user("y"))
    assert live.services.pipeline.usage.report(0, 2**40)["bob"].requests == before + 1


def test_fair_share_and_queue_pings_as_on_chat() -> None:
    """A light caller's message goes ahead of a flood of another's in its class, and its stream
    says so while it waits: `ping` events and the position as a comment."""
    with live_server(KEYS, "scheduler.max_concurrency=1", "engine.sim.token_latency_ms=10") as live:
        live.status_key = "sk-ops-00001"
        flood = [
            threading.Thread(
                target=lambda: client(live).messages.create(model="sim", max_tokens=250, messages=user("flood"))
            )
            for _ in range(4)
        ]
        for thread in flood:
            thread.start()
        live.wait_for(lambda s: s["waiting_total"] == 3)
        body = {"model": "sim", "max_tokens": 5, "stream": True, "messages": user("me"), "request_id": "bob-1"}
        with httpx.stream(
            "POST", live.url + "/v1/messages", json=body, timeout=60, headers={"x-api-key": "sk-bob-00001"}
        ) as response:
            lines = response.iter_lines()
            seen = [next(lines) for _ in range(3)]  # message_start: the stream is open, bob waits
            position = live.status(request_id="bob-1", caller="bob")
            seen += [next(lines) for _ in range(3)]
            rest = list(lines)
        for thread in flood:
            thread.join(60)
    assert position["state"] == "queued" and position["position"] == 1  # ahead of alice's three
    assert (
        seen[0] == "event: message_start"
        and "event: ping" in seen
        and any(line.startswith(": queue position=") for line in seen)
    )
    assert "event: message_stop" in rest


def test_a_gateway_serves_messages_from_an_upstream_that_speaks_only_chat() -> None:
    with (
        live_server() as upstream,
        live_server(
            "engine.backend=openai",
            f"engine.openai.upstreams=[{upstream.base_url}]",
            "engine.openai.health_interval_s=0.2",
        ) as gateway,
    ):
        api = client(gateway, "any")
        text = api.messages.create(model="sim", max_tokens=20, messages=user("Through the gateway."))
        call = api.messages.create(
            model="sim", max_tokens=300, tools=[WEATHER], tool_choice={"type": "any"}, messages=user("Weather?")
        )
        deadline = time.monotonic() + 5  # the upstream may count an answer a moment after the gateway has it
        while (served := upstream.services.pipeline.usage.report(0, 2**40)["anonymous"].requests) < 2:
            assert time.monotonic() < deadline, served
            time.sleep(0.02)
    assert text.content[-1].type == "text" and text.content[-1].text
    assert call.stop_reason == "tool_use" and call.content[-1].name == "get_weather"
    assert served == 2  # both went upstream as chat completions


def test_a_stream_and_a_body_hold_the_same_blocks(live: LiveServer) -> None:
    """Thinking cut by max_tokens stands alone in both, as Anthropic's own answers do."""
    if not live.services.config.engine.sim.harmony:
        pytest.skip("the plain simulator writes no reasoning")
    asked = {"model": "sim", "max_tokens": 12, "messages": user("Think a lot.")}
    whole = client(live).messages.create(**asked)
    with client(live).messages.stream(**asked) as stream:
        streamed = stream.get_final_message()
    assert [b.type for b in whole.content] == [b.type for b in streamed.content] == ["thinking"]


SAME = {"temperature": 0}  # the simulator's text then follows from the prompt alone (this SDK has no such argument)


def _stopped_on(api: anthropic.Anthropic, asked: dict) -> list:
    """The same request answered whole and streamed (the SDK's final message, from message_delta)."""
    whole = api.messages.create(**asked)
    with api.messages.stream(**asked) as stream:
        return [whole, stream.get_final_message()]


def _a_word_of(api: anthropic.Anthropic, asked: dict) -> str:
    """A word the deterministic simulator writes for this request (temperature 0) when not stopped."""
    free = api.messages.create(**asked)
    words = [w for w in "".join(b.text for b in free.content if b.type == "text").split() if len(w) > 3]
    assert free.stop_reason == "end_turn" and words
    return words[len(words) // 2]


def test_a_stop_sequence_hit_is_named_and_a_miss_is_end_turn(live: LiveServer) -> None:
    api = client(live)
    asked = {"model": "sim", "max_tokens": 1000, "messages": user("Stop somewhere."), "extra_body": SAME}
    stop = _a_word_of(api, asked)
    for message in _stopped_on(api, {**asked, "stop_sequences": ["never-written", stop]}):
        assert message.stop_reason == "stop_sequence" and message.stop_sequence == stop
        assert stop not in "".join(b.text for b in message.content if b.type == "text")
    for message in _stopped_on(api, {**asked, "stop_sequences": ["never-written"]}):
        assert message.stop_reason == "end_turn" and message.stop_sequence is None
    chat = httpx.post(
        live.url + "/v1/chat/completions",
        headers={"Authorization": "Bearer sk-alice-0001"},
        timeout=30,
        json={"model": "sim", "messages": asked["messages"], "stop": [stop], **SAME},
    ).json()
    assert chat["choices"][0]["finish_reason"] == "stop"  # chat completions say no more than before


def test_a_cached_answer_keeps_its_stop_sequence(make_server, tmp_path) -> None:
    live = make_server("cache.enabled=true", f"cache.path={tmp_path / 'cache.sqlite3'}", "engine.sim.natural_stop=true")
    api = client(live, "any")
    asked = {"model": "sim", "max_tokens": 1000, "messages": user("Stop, then again."), "extra_body": SAME}
    asked["stop_sequences"] = [_a_word_of(api, asked)]
    fresh = api.messages.with_raw_response.create(**asked)
    replayed = api.messages.with_raw_response.create(**asked)
    assert (fresh.headers["x-cache"], replayed.headers["x-cache"]) == ("MISS", "HIT")
    for message in (fresh.parse(), replayed.parse()):
        assert message.stop_reason == "stop_sequence" and message.stop_sequence == asked["stop_sequences"][0]


def test_a_cached_message_is_served_only_to_its_own_key(make_server, tmp_path) -> None:
    live = make_server(
        KEYS, "cache.enabled=true", f"cache.path={tmp_path / 'cache.sqlite3'}", "cache.namespace_by_key=true"
    )
    asked = {"model": "sim", "max_tokens": 20, "messages": user("Cached for whom?"), "extra_body": SAME}
    alice, bob = client(live, "sk-alice-0001"), client(live, "sk-bob-00001")
    seen = [api.messages.with_raw_response.create(**asked).headers["x-cache"] for api in (alice, alice, bob)]
    assert seen == ["MISS", "HIT", "MISS"]


def test_a_connection_level_refusal_on_the_messages_path_is_anthropics(make_server) -> None:
    import socket

    live = make_server("server.max_header_bytes=1024")
    host, port = live.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 4096 + b"\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 431") and b'"type":"error"' in answer.replace(b" ", b"")


def test_a_high_message_starts_before_low_ones_that_waited_longer() -> None:
    """Priority applies as on chat: with the one slot busy, a high message sent after three low ones
    starts first (X-Priority, as Claude Code can be given with ANTHROPIC_CUSTOM_HEADERS)."""
    with live_server(
        "scheduler.max_concurrency=1",
        "scheduler.limit.demand_window_s=0",  # the limit holds
        "engine.sim.token_latency_ms=10",
    ) as live:
        api = client(live, "any")
        done: list[str] = []

        def send(name: str, priority: str, tokens: int) -> None:
            api.messages.create(
                model="sim", max_tokens=tokens, messages=user(name), extra_headers={"X-Priority": priority}
            )
            done.append(name)

        threads = [threading.Thread(target=send, args=("busy", "low", 100))]
        threads[0].start()
        live.wait_for(lambda s: s["running"] == 1)
        for i in range(3):
            threads.append(threading.Thread(target=send, args=(f"low-{i}", "low", 5)))
            threads[-1].start()
        live.wait_for(lambda s: s["waiting_total"] == 3)
        threads.append(threading.Thread(target=send, args=("high", "high", 5)))
        threads[-1].start()
        live.wait_for(lambda s: s["taken_back"] == 1)  # the high runs 50 ms: a count, not a moment to catch
        for thread in threads:
            thread.join(60)
    # the high took the busy low's one slot (suspended, resumed after it: the oldest waiting low)
    assert done[:2] == ["high", "busy"] and sorted(done[2:]) == ["low-0", "low-1", "low-2"]
