"""Ollama's API through the official `ollama` Python client against a live server on the simulator
(plain and harmony): chat and generate, streamed and whole, tools round-tripped with arguments as
objects, format, think, options, the model list; errors as Ollama's `{"error": ...}` the client
raises as `ResponseError`; and the pipeline's rules (keys, classes, limits, the queue) as on chat."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import ollama
import pytest

from tests.api.team import KEYS, live  # noqa: F401 - live: the module's server fixture
from tests.conftest import LiveServer, live_server

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    },
}


def client(live: LiveServer, key: str | None = "sk-alice-0001") -> ollama.Client:
    api = ollama.Client(host=live.url, headers={"Authorization": f"Bearer {key}"} if key else {})
    live.clients.append(api)  # closed with the server
    return api


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_chat_answers_whole_and_streamed(live: LiveServer) -> None:
    api = client(live)
    whole = api.chat(model="sim", messages=user("Say hello."), options={"num_predict": 40})
    assert whole.done and whole.done_reason in ("stop", "length") and whole.message.role == "assistant"
    assert (whole.message.content or whole.message.thinking) and whole.eval_count and whole.prompt_eval_count
    assert whole.total_duration and whole.total_duration > 0
    pieces = list(api.chat(model="sim:latest", messages=user("Say hello."), stream=True, options={"num_predict": 40}))
    assert [p.done for p in pieces] == [False] * (len(pieces) - 1) + [True]
    assert "".join((p.message.content or "") + (p.message.thinking or "") for p in pieces)
    assert 1 <= pieces[-1].eval_count <= 40  # a sampled length: the simulator stops where it likes
    assert pieces[-1].model == "sim:latest"  # the name as the client gave it, as Ollama answers


def test_generate_takes_a_prompt_and_a_system(live: LiveServer) -> None:
    api = client(live)
    whole = api.generate(model="sim", prompt="Why is the sky blue?", system="Be brief.", options={"num_predict": 30})
    assert whole.done and (whole.response or whole.thinking) and whole.eval_count <= 30
    streamed = list(api.generate(model="sim", prompt="Why?", stream=True, options={"num_predict": 20}))
    assert streamed[-1].done and "".join(p.response + (p.thinking or "") for p in streamed)


def test_num_predict_bounds_the_answer_and_says_length(live: LiveServer) -> None:
    answer = client(live).chat(model="sim", messages=user("Tell me a long story."), options={"num_predict": 3})
    assert answer.eval_count == 3 and answer.done_reason == "length"


def test_num_ctx_bounds_prompt_and_answer_together(live: LiveServer) -> None:
    api = client(live)
    prompt = api.chat(model="sim", messages=user("Tell me a long story."), options={"num_predict": 1})
    context = prompt.prompt_eval_count + 4
    bounded = api.chat(
        model="sim", messages=user("Tell me a long story."), options={"num_ctx": context, "num_predict": 100}
    )
    assert bounded.eval_count == 4 and bounded.done_reason == "length"
    with pytest.raises(ollama.ResponseError) as err:
        api.chat(model="sim", messages=user("Tell me a long story."), options={"num_ctx": 2})
    assert err.value.status_code == 400 and err.value.error.startswith("options.num_ctx: the context is 2 tokens")


def test_a_tool_loop_with_arguments_as_objects(live: LiveServer) -> None:
    api = client(live)
    history = user("What is the weather in Paris?")
    asked = api.chat(model="sim", messages=history, tools=[WEATHER], options={"num_predict": 300})
    calls = asked.message.tool_calls or []
    assert calls and calls[0].function.name == "get_weather"
    assert isinstance(calls[0].function.arguments["city"], str) and isinstance(calls[0].function.arguments["days"], int)
    history += [
        asked.message.model_dump(exclude_none=True),
        {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
    ]
    answered = api.chat(model="sim", messages=history, tools=[WEATHER], options={"num_predict": 400})
    assert answered.done and not answered.message.tool_calls and answered.message.content


def test_streamed_tool_calls_come_whole_before_the_last_line(live: LiveServer) -> None:
    pieces = list(
        client(live).chat(
            model="sim", messages=user("Weather in Oslo?"), tools=[WEATHER], stream=True, options={"num_predict": 300}
        )
    )
    with_calls = [p for p in pieces if p.message.tool_calls]
    assert len(with_calls) == 1 and not with_calls[0].done and pieces[-1].done
    assert isinstance(with_calls[0].message.tool_calls[0].function.arguments["city"], str)


def test_a_tool_message_must_answer_a_call(live: LiveServer) -> None:
    with pytest.raises(ollama.ResponseError) as err:
        client(live).chat(model="sim", messages=[*user("hi"), {"role": "tool", "content": "sunny"}])
    assert err.value.status_code == 400 and err.value.error.startswith("messages.1: a tool message must answer")


def test_format_as_a_schema_holds_the_answer_to_it(live: LiveServer) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    answer = client(live).chat(model="sim", messages=user("Name someone."), format=schema, options={"num_predict": 200})
    assert set(json.loads(answer.message.content)) == {"name"}
    as_json = client(live).generate(model="sim", prompt="Describe it.", format="json", options={"num_predict": 200})
    assert isinstance(json.loads(as_json.response), dict)


def test_think_shows_or_hides_the_thinking(live: LiveServer) -> None:
    api = client(live)
    if not live.services.config.engine.sim.harmony:
        plain = api.chat(model="sim", messages=user("Think."), think=True, options={"num_predict": 20})
        assert plain.message.content and plain.message.thinking is None  # a model that writes no thinking
        return
    shown = api.chat(model="sim", messages=user("Think first."), think="low", options={"num_predict": 200})
    hidden = api.chat(model="sim", messages=user("Think first."), think=False, options={"num_predict": 200})
    assert shown.message.thinking and hidden.message.thinking is None and hidden.message.content


def test_the_model_list_and_details(live: LiveServer) -> None:
    api = client(live)
    assert [m.model for m in api.list().models] == ["sim:latest"]
    shown = api.show("sim")
    assert "completion" in (shown.capabilities or []) and shown.modelinfo["context_length"] > 0
    assert [m.model for m in api.ps().models] == ["sim:latest"]
    assert httpx.get(live.url + "/api/version", headers={"Authorization": "Bearer sk-bob-00001"}).json()["version"]
    loaded = api.generate(model="sim")  # no prompt: Ollama's way to load the model
    assert loaded.done and loaded.done_reason == "load" and loaded.response == ""


@pytest.mark.parametrize(
    "body, param",
    [
        ({"options": {"mirostat": 2}}, "options.mirostat"),
        ({"options": {"num_gpu": 1}}, "options.num_gpu"),
        ({"options": {"fancy": 1}}, "options.fancy"),
        ({"options": {"temperature": 9}}, "options.temperature"),
        ({"images": ["aGk="]}, "images"),
        ({"keep_alive": 0, "messages": []}, "keep_alive"),
        ({"keep_alive": "0s"}, "keep_alive"),
        ({"keep_alive": "-0h"}, "keep_alive"),
        ({"keep_alive": "banana"}, "keep_alive"),
        ({"format": ["x"]}, "format"),
        ({"format": {"type": "nonsense"}}, "format"),
        ({"options": {"repeat_last_n": 0}}, "options.repeat_last_n"),
        ({"options": {"num_gpu": 0}}, "options.num_gpu"),
        ({"messages": [{"role": "user", "content": "hi", "tool_name": "x"}]}, "messages.0.tool_name"),
        ({"think": "extreme"}, "think"),
        ({"format": "xml"}, "format"),
        ({"surprise": True}, "surprise"),
        ({"raw": True}, "raw"),  # a chat has no raw form
    ],
)
def test_bad_requests_are_ollama_errors_naming_the_field(live: LiveServer, body: dict, param: str) -> None:
    sent = {"model": "sim", "messages": user("hi"), "stream": False, **body}
    response = httpx.post(live.url + "/api/chat", json=sent, headers={"Authorization": "Bearer sk-bob-00001"})
    assert response.status_code == 400 and set(response.json()) == {"error"}
    assert param in response.json()["error"]


def test_options_at_their_neutral_values_ask_for_nothing(live: LiveServer) -> None:
    neutral = {"mirostat": 0, "mirostat_tau": 5.0, "tfs_z": 1.0, "typical_p": 1.0, "use_mmap": False, "num_predict": 5}
    turns = [{"role": "user", "content": "hi", "images": []}]
    for keep_alive in ("5m", "1h30m", -1, "-1s"):
        answer = client(live).chat(model="sim", messages=turns, options=neutral, keep_alive=keep_alive)
        assert answer.done and answer.eval_count <= 5


def test_model_management_is_the_operators_and_unknown_paths_are_404(live: LiveServer) -> None:
    with pytest.raises(ollama.ResponseError) as pulled:
        client(live).pull("llama3.2")
    assert pulled.value.status_code == 501
    with pytest.raises(ollama.ResponseError) as missing:
        client(live).chat(model="llama3.2", messages=user("hi"))
    assert missing.value.status_code == 404 and "llama3.2" in missing.value.error
    other = httpx.get(live.url + "/api/nothing-here", headers={"Authorization": "Bearer sk-bob-00001"})
    assert other.status_code == 404 and set(other.json()) == {"error"}


def test_keys_classes_and_limits_apply_as_on_chat(live: LiveServer) -> None:
    with pytest.raises(ollama.ResponseError) as unknown:
        client(live, "sk-unknown-01").chat(model="sim", messages=user("x"))
    assert unknown.value.status_code == 401 and unknown.value.error == "invalid or missing API key"
    with pytest.raises(ollama.ResponseError) as bare:
        client(live, None).list()
    assert bare.value.status_code == 401
    low = httpx.post(
        live.url + "/api/chat",
        json={"model": "sim", "messages": user("x"), "stream": False, "options": {"num_predict": 3}},
        headers={"Authorization": "Bearer sk-bob-00001", "X-Priority": "low"},
    )
    assert low.status_code == 200 and low.headers["x-priority"] == "low"
    before = live.services.pipeline.usage.report(0, 2**40)["bob"].requests
    client(live, "sk-bob-00001").chat(model="sim", messages=user("y"), options={"num_predict": 3})
    assert live.services.pipeline.usage.report(0, 2**40)["bob"].requests == before + 1
    slow = client(live, "sk-slow-0001")
    slow.chat(model="sim", messages=user("one"), options={"num_predict": 3})
    with pytest.raises(ollama.ResponseError) as limited:
        slow.chat(model="sim", messages=user("two"), options={"num_predict": 3})
    assert limited.value.status_code == 429


def test_a_waiting_stream_carries_its_place_and_the_first_line_is_ndjson() -> None:
    with live_server(KEYS, "scheduler.max_concurrency=1", "engine.sim.token_latency_ms=10") as live:
        live.status_key = "sk-ops-00001"
        hold = threading.Thread(
            target=lambda: client(live).chat(model="sim", messages=user("hold"), options={"num_predict": 250})
        )
        hold.start()
        live.wait_for(lambda s: s["running"] == 1)
        body = {"model": "sim", "messages": user("me"), "options": {"num_predict": 5}}
        with httpx.stream(
            "POST", live.url + "/api/chat", json=body, timeout=60, headers={"Authorization": "Bearer sk-bob-00001"}
        ) as response:
            kind = response.headers["content-type"]
            lines = [json.loads(line) for line in response.iter_lines()]
        hold.join(60)
    assert kind.startswith("application/x-ndjson")
    assert lines[0]["queue"]["position"] == 1 and lines[0]["message"]["content"] == "" and not lines[0]["done"]
    assert lines[-1]["done"] and lines[-1]["eval_count"] <= 5


def test_a_format_schema_is_held_to_the_bounds_of_every_schema(live: LiveServer) -> None:
    """The pattern and size bounds the chat API's schemas have (protocols/json_bounds.py)."""
    nested = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(a+)+" * 30}}}
    response = httpx.post(
        live.url + "/api/chat",
        json={"model": "sim", "messages": user("hi"), "stream": False, "format": nested},
        headers={"Authorization": "Bearer sk-bob-00001"},
    )
    assert response.status_code == 400 and " in format " in response.json()["error"]


def test_show_takes_its_own_fields_only(live: LiveServer) -> None:
    headers = {"Authorization": "Bearer sk-bob-00001"}
    shown = httpx.post(live.url + "/api/show", json={"name": "sim", "verbose": True}, headers=headers)
    assert shown.status_code == 200 and "completion" in shown.json()["capabilities"]
    odd = httpx.post(live.url + "/api/show", json={"model": "sim", "detail": 1}, headers=headers)
    assert odd.status_code == 400 and "detail" in odd.json()["error"]


def test_an_empty_format_asks_for_any_json(live: LiveServer) -> None:
    answer = client(live).chat(model="sim", messages=user("Describe it."), format={}, options={"num_predict": 200})
    assert isinstance(json.loads(answer.message.content), dict)


def test_an_ollama_answer_is_not_served_to_another_wire_from_the_cache(tmp_path: Path) -> None:
    """Its `num_predict` is a bound that may have stopped at the context, not a `max_tokens`."""
    cache = ("cache.enabled=true", f"cache.path={tmp_path / 'cache.sqlite3'}")
    with live_server(*cache, "engine.sim.natural_stop=true") as live:
        ollama_body = {"model": "sim", "messages": user("Cache me."), "stream": False}
        first = httpx.post(live.url + "/api/chat", json={**ollama_body, "options": {"num_predict": 5, "seed": 1}})
        again = httpx.post(live.url + "/api/chat", json={**ollama_body, "options": {"num_predict": 5, "seed": 1}})
        chat = httpx.post(
            live.url + "/v1/chat/completions",
            json={"model": "sim", "messages": user("Cache me."), "max_tokens": 5, "seed": 1},
        )
        random = httpx.post(live.url + "/api/chat", json={**ollama_body, "options": {"num_predict": 5, "seed": -1}})
    assert (first.headers["x-cache"], again.headers["x-cache"], chat.headers["x-cache"]) == ("MISS", "HIT", "MISS")
    assert random.headers["x-cache"] == "BYPASS"  # Ollama's seed -1 is a random one, never cached


def test_langchains_chat_ollama_runs_unchanged(live: LiveServer) -> None:
    """LangChain's Ollama chat model: answers, streams, a tool loop and structured output."""
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_ollama import ChatOllama

    headers = {"Authorization": "Bearer sk-alice-0001"}
    llm = ChatOllama(model="sim", base_url=live.url, num_predict=30, client_kwargs={"headers": headers})
    person = ChatOllama(model="sim", base_url=live.url, num_predict=200, client_kwargs={"headers": headers})
    live.clients += [llm._client, person._client]  # its own ollama clients, closed with the server
    assert llm.invoke("Say hello.").content or live.services.config.engine.sim.harmony
    assert list(llm.stream("Say hello."))
    tools = llm.bind_tools([WEATHER])
    asked = tools.invoke("Weather in Paris?")
    assert asked.tool_calls and asked.tool_calls[0]["name"] == "get_weather"
    result = ToolMessage("sunny", tool_call_id=asked.tool_calls[0]["id"])
    answered = tools.invoke([HumanMessage("Weather in Paris?"), asked, result])
    assert not answered.tool_calls
    schema = {"title": "Person", "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    assert set(person.with_structured_output(schema, method="json_schema").invoke("Name someone.")) == {"name"}


def test_errors_name_ollamas_fields_not_the_chat_requests(live: LiveServer) -> None:
    headers = {"Authorization": "Bearer sk-bob-00001"}
    bad_schema = {"model": "sim", "messages": user("hi"), "stream": False, "format": {"type": "nonsense"}}
    schema = httpx.post(live.url + "/api/chat", json=bad_schema, headers=headers).json()["error"]
    assert schema.startswith("invalid value for 'format'") and "response_format" not in schema
    long = {"model": "sim", "prompt": "hi " * 5000, "stream": False}
    prompt = httpx.post(live.url + "/api/generate", json=long, headers=headers)
    assert prompt.status_code == 400 and "the prompt is" in prompt.json()["error"]
    assert "messages" not in prompt.json()["error"]
    calls = [{"id": "a", "function": {"name": "get_weather", "arguments": {}}}] * 2
    twice = {"model": "sim", "stream": False, "messages": [*user("hi"), {"role": "assistant", "tool_calls": calls}]}
    duplicate = httpx.post(live.url + "/api/chat", json=twice, headers=headers).json()["error"]
    assert duplicate.startswith("messages.1.tool_calls.1.id")


def test_head_answers_where_ollama_does(live: LiveServer) -> None:
    for path in ("/api/tags", "/api/version"):
        assert httpx.head(live.url + path, headers={"Authorization": "Bearer sk-bob-00001"}).status_code == 200


def test_answers_bounded_apart_are_cached_apart(tmp_path: Path) -> None:
    """A `num_ctx` answer (cut by the prompt's length) is never stored; `num_predict: -1` (to the
    context) is not the server's default length."""
    cache = ("cache.enabled=true", f"cache.path={tmp_path / 'cache.sqlite3'}")
    # A short context: "to the context" is a few hundred steps, not 4,096 (CI's slow cores took >5 s).
    short = ("engine.sim.natural_stop=false", "engine.sim.max_model_len=256", "server.default_max_tokens=20")
    with live_server(*cache, *short) as live:

        def ask(options: dict) -> httpx.Response:
            body = {"model": "sim", "messages": user("Cache me."), "stream": False, "options": {"seed": 1, **options}}
            return httpx.post(live.url + "/api/chat", json=body, timeout=60)

        prompt = ask({"num_predict": 1}).json()["prompt_eval_count"]
        cut = ask({"num_ctx": prompt + 4})
        whole = ask({})
        filled = ask({"num_predict": -1})
    assert (cut.headers["x-cache"], cut.json()["eval_count"]) == ("BYPASS", 4)
    assert (whole.headers["x-cache"], whole.json()["eval_count"]) == ("MISS", 20)
    assert filled.headers["x-cache"] == "MISS" and filled.json()["eval_count"] > 20


def test_raw_generate_continues_the_prompt_as_given(live: LiveServer) -> None:
    """`raw: true`: a text completion (no chat template, nothing read out of the answer), counted
    as `/v1/completions` counts the same prompt; what only a chat has is a 400 naming it."""
    api = client(live)
    prompt = "<|start|>user<|message|>Hi<|end|><|start|>assistant"
    raw = api.generate(model="sim", prompt=prompt, raw=True, options={"num_predict": 6, "seed": 3})
    assert raw.response and not raw.thinking and "<|" not in raw.response and raw.eval_count <= 6
    text = live.client(api_key="sk-alice-0001").completions.create(model="sim", prompt=prompt, max_tokens=1)
    templated = api.generate(model="sim", prompt=prompt, options={"num_predict": 1})
    assert raw.prompt_eval_count == text.usage.prompt_tokens != templated.prompt_eval_count
    streamed = list(
        api.generate(model="sim", prompt=prompt, raw=True, stream=True, options={"num_predict": 6, "seed": 3})
    )
    assert "".join(p.response for p in streamed) == raw.response and streamed[-1].done
    for name, value in (("system", "Be brief."), ("format", "json"), ("think", "low"), ("top_logprobs", 2)):
        with pytest.raises(ollama.ResponseError) as refused:
            api.generate(model="sim", prompt=prompt, raw=True, **{name: value})
        assert refused.value.status_code == 400 and refused.value.error.startswith(name), refused.value.error


def test_a_raw_answer_is_cached_by_the_length_it_was_given(tmp_path: Path) -> None:
    """Left out, `num_predict` is the server's default, not `/v1/completions`' 16."""
    cache = ("cache.enabled=true", f"cache.path={tmp_path / 'cache.sqlite3'}", "server.default_max_tokens=40")
    with live_server(*cache, "engine.sim.natural_stop=false") as live:

        def ask(options: dict) -> httpx.Response:
            body = {"model": "sim", "prompt": "Hello there", "raw": True, "stream": False, "options": options}
            return httpx.post(live.url + "/api/generate", json=body, timeout=60)

        unset, sixteen = ask({"temperature": 0}), ask({"temperature": 0, "num_predict": 16})
        plain = httpx.post(
            live.url + "/api/chat",
            json={"model": "sim", "messages": user("x"), "raw": False, "stream": False, "options": {"num_predict": 2}},
            timeout=60,
        )
    assert (unset.headers["x-cache"], unset.json()["eval_count"]) == ("MISS", 40)
    assert (sixteen.headers["x-cache"], sixteen.json()["eval_count"]) == ("MISS", 16)
    assert plain.status_code == 200  # `raw: false` on a chat asks for nothing, as on Ollama
