"""The llama.cpp engine (xllamacpp) with the bundled GGUF model, through our HTTP server and the
official client: answers, streaming, abort, the context check, priorities, prefix reuse, tools,
structured outputs and a load that holds the limits."""

from __future__ import annotations

import importlib.util
import json
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import ollama
import openai
import pytest

from core.types import GenParams
from engine.llamacpp_engine import request_body
from engine.registry import chosen_backend
from settings import ConfigError, load_config
from tests.conftest import FAST_SIM, LiveServer, live_server
from tests.engine.resume import plain_and_resumed

MODEL = "smollm2-135m-instruct"
SLOTS = 4
LLAMACPP = [
    *FAST_SIM,
    "engine.backend=llamacpp",
    f"engine.llamacpp.n_parallel={SLOTS}",
    "engine.llamacpp.kv_tokens=8192",
    "engine.llamacpp.max_model_len=2048",
    "scheduler.max_concurrency=0",
]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}

pytestmark = pytest.mark.llamacpp


def require_llamacpp() -> None:
    if importlib.util.find_spec("xllamacpp") is None:
        if os.environ.get("REQUIRE_LLAMACPP"):
            pytest.fail("xllamacpp is not installed but REQUIRE_LLAMACPP is set")
        pytest.skip("xllamacpp is not installed (make test installs it)")


@pytest.fixture(scope="module")
def llamacpp() -> Iterator[LiveServer]:
    require_llamacpp()
    with live_server(base=LLAMACPP, startup_timeout=120) as live:
        yield live


@pytest.fixture(scope="module")
def patient() -> Iterator[LiveServer]:
    """A fixed running limit and long wait limits: for tests of order and slots, which the adaptive
    limit and the door would otherwise decide on a slow machine (CI's two cores: highs refused in
    emergency mode, their budget 0 s once their first tokens took over the TTFT objective)."""
    require_llamacpp()
    fixed = [
        "scheduler.limit.adaptive=false",
        *(f"scheduler.max_wait_s.{c}=600" for c in ("high", "medium", "low")),
        "scheduler.pressure.low_max_wait_s=600",
        "scheduler.pressure.high_max_wait_s=600",
    ]
    with live_server(*fixed, base=LLAMACPP, startup_timeout=120) as live:
        yield live


def ask(client: openai.OpenAI, text: str, **kwargs):
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}], **kwargs)


def test_answers_and_streams_with_usage(llamacpp: LiveServer):
    client = llamacpp.client()
    answer = ask(client, "Name three colours.", max_tokens=16)
    assert answer.choices[0].message.content and answer.usage.completion_tokens <= 16
    assert answer.choices[0].finish_reason in ("stop", "length")
    chunks = list(
        ask(client, "Name three colours.", max_tokens=12, stream=True, stream_options={"include_usage": True})
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = chunks[-1].usage
    assert text and usage is not None and 1 <= usage.completion_tokens <= 12
    assert usage.prompt_tokens == answer.usage.prompt_tokens  # counted by llama.cpp's own template


def test_a_stop_sequence_stops_but_goes_unnamed(llamacpp: LiveServer):
    """llama.cpp's OpenAI endpoints neither name the stop string that matched nor keep it in the
    text (docs/api.md): the Messages API stops there and says `end_turn`, no `stop_sequence`."""
    asked = {
        "model": MODEL,
        "max_tokens": 24,
        "temperature": 0,
        "messages": [{"role": "user", "content": "Count from 1 to 20 separated by commas."}],
    }
    free = httpx.post(llamacpp.url + "/v1/messages", json=asked, timeout=60).json()["content"][-1]["text"]
    stop = next(w for w in free.split() if len(w) > 1 and w != free.split()[0])
    stopped = httpx.post(llamacpp.url + "/v1/messages", json={**asked, "stop_sequences": [stop]}, timeout=60).json()
    assert stop not in stopped["content"][-1]["text"] and free.startswith(stopped["content"][-1]["text"])
    assert (stopped["stop_reason"], stopped["stop_sequence"]) == ("end_turn", None)


def test_a_repeated_prompt_reuses_its_prefix(llamacpp: LiveServer):
    client = llamacpp.client()
    long = "Here is a long preamble about the sea and ships. " * 20
    ask(client, long + "Summarise.", max_tokens=2)
    again = ask(client, long + "Summarise.", max_tokens=2)
    assert again.usage.prompt_tokens_details.cached_tokens >= again.usage.prompt_tokens * 0.8


def test_the_context_limit_is_a_400_before_the_engine(llamacpp: LiveServer):
    with pytest.raises(openai.BadRequestError) as err:
        ask(llamacpp.client(), "word " * 2100, max_tokens=8)
    assert "maximum context length is 2048 tokens" in str(err.value)
    with pytest.raises(openai.BadRequestError) as err:
        ask(llamacpp.client(), "hi", max_tokens=8, extra_body={"min_tokens": 4})
    assert err.value.body["param"] == "min_tokens" and err.value.body["code"] == "unsupported_parameter"


def test_a_closed_stream_frees_its_slot_at_once(llamacpp: LiveServer):
    stream = ask(
        llamacpp.client(), "Count to a thousand.", max_tokens=1500, stream=True, extra_body={"ignore_eos": True}
    )
    for i, _ in enumerate(stream):
        if i == 3:
            break
    stream.close()
    llamacpp.wait_for(lambda s: s["running"] == 0, timeout=10)
    deadline = time.monotonic() + 10
    while busy_slots(llamacpp) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert busy_slots(llamacpp) == 0  # as llama.cpp itself reports its slots


def busy_slots(live: LiveServer) -> int:
    engine = live.services.engine
    slots = httpx.get(engine._server.listening_address + "/slots", headers=engine._http.headers, timeout=5).json()
    return sum(slot["is_processing"] for slot in slots)


def test_the_engines_own_port_refuses_callers_without_its_key(llamacpp: LiveServer):
    """Nobody on the machine reaches llama.cpp around our scheduler."""
    address = llamacpp.services.engine._server.listening_address
    answer = httpx.post(address + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 401


@pytest.mark.parametrize("given", [{"temperature": 1.0, "top_p": 1.0}, {}], ids=["given", "unset"])
def test_sampling_left_unset_is_llama_cpps_own(llamacpp: LiveServer, given: dict):
    """What a request leaves unset, llama.cpp's defaults decide (temperature 0.8, top_p 0.95,
    top_k 40, min_p 0.05), so a seeded answer is the one its own server gives the same request;
    full-vocabulary sampling cost 10-20 % of its tok/s at eight streams, and top_p 1 where its
    server samples at 0.95 gave answers of other lengths (0.7x tok/s 0.95x in bench/load.py)."""
    engine = llamacpp.services.engine
    body = {"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 24, "seed": 11, **given}
    own = httpx.post(
        engine._server.listening_address + "/v1/chat/completions", json=body, headers=engine._http.headers, timeout=60
    ).json()["choices"][0]["message"]["content"]
    ours = ask(
        llamacpp.client(),
        body["messages"][0]["content"],
        max_tokens=24,
        seed=11,
        extra_headers={"Cache-Control": "no-store"},
        **given,
    )
    assert ours.choices[0].message.content == own


def test_sampling_fields_reach_llama_cpp_only_when_given():
    names = ("temperature", "top_p", "top_k", "min_p")
    unset = request_body(MODEL, {"messages": []}, GenParams(max_tokens=4))
    assert not set(names) & set(unset)
    given = request_body(MODEL, {"messages": []}, GenParams(max_tokens=4, temperature=0, top_p=1, top_k=0, min_p=0))
    assert [given[name] for name in names] == [0, 1, 0, 0]  # 0: off, as the caller asked


def test_tools_and_structured_outputs(llamacpp: LiveServer):
    client = llamacpp.client()
    forced = ask(
        client, "What is the weather in Paris?", max_tokens=100, temperature=0, tools=[WEATHER], tool_choice="required"
    )
    call = forced.choices[0].message.tool_calls[0]
    assert forced.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    assert "city" in json.loads(call.function.arguments)
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    person = ask(
        client,
        "Make up a person.",
        max_tokens=100,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}},
    )
    parsed = json.loads(person.choices[0].message.content)
    assert set(parsed) == {"name", "age"} and isinstance(parsed["age"], int)


def test_a_load_of_32_completes_with_the_slots_holding(patient: LiveServer):
    client = patient.client()
    running: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            running.append(patient.services.engine.stats().running)
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(32) as pool:
            answers = list(
                pool.map(
                    lambda i: ask(
                        client,
                        f"Question {i}: what is {i} plus {i}?",
                        max_tokens=12,
                        extra_body={"priority": ["low", "medium", "high"][i % 3]},
                    ),
                    range(32),
                )
            )
    finally:  # a failed request must not leave the watcher keeping pytest from exiting
        stop.set()
        watcher.join()
    assert all(a.choices[0].message.content is not None for a in answers)
    assert max(running) <= SLOTS and max(running) >= 2  # batched, never past the engine's slots


def test_a_burst_prefills_lower_prompts_one_at_a_time_while_highs_come(llamacpp: LiveServer):
    status = llamacpp.status()  # prompts prefilled together take as long on llama.cpp as one after another
    assert (status["lower_prefills"], status["burst_prefills"]) == (1, 1)


def test_priorities_reach_the_dispatch_order(patient: LiveServer):
    """With every slot busy, a high request queued after a low one starts first."""
    client = patient.client()
    started: dict[str, float] = {}

    def run(tag: str, priority: str, tokens: int) -> None:
        stream = ask(
            client,
            f"Tell a story ({tag}).",
            max_tokens=tokens,
            stream=True,
            extra_body={"priority": priority, "ignore_eos": True},
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                started.setdefault(tag, time.monotonic())

    with ThreadPoolExecutor(SLOTS + 2) as pool:
        busy = [pool.submit(run, f"busy{i}", "low", 200) for i in range(SLOTS)]
        patient.wait_for(lambda s: s["running"] == SLOTS, timeout=60)
        low = pool.submit(run, "low", "low", 4)
        patient.wait_for(lambda s: s["waiting_total"] == 1, timeout=10)
        high = pool.submit(run, "high", "high", 4)
        for future in [*busy, low, high]:
            future.result(timeout=300)
    assert started["high"] < started["low"]


def test_auto_picks_llamacpp_without_an_nvidia_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert chosen_backend("auto") == "llamacpp" and chosen_backend("sim") == "sim"
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200'\n")
    smi.chmod(0o755)
    assert chosen_backend("auto") == "vllm"
    smi.write_text("#!/bin/sh\nexit 9\n")  # the tool without a working driver
    assert chosen_backend("auto") == "llamacpp"


def test_bad_llamacpp_settings_are_one_line_errors():
    with pytest.raises(ConfigError, match="cannot exceed kv_tokens"):
        load_config(None, overrides=["engine.llamacpp.kv_tokens=1024", "engine.llamacpp.max_model_len=2048"])


def test_a_missing_model_file_fails_the_start_with_its_path():
    if importlib.util.find_spec("xllamacpp") is None:
        pytest.skip("xllamacpp is not installed")
    with pytest.raises(RuntimeError, match="/nowhere/model.gguf is not a file"):
        with live_server(*LLAMACPP, "engine.llamacpp.model=/nowhere/model.gguf", startup_timeout=30):
            pass


def test_a_suspended_chat_goes_on_from_its_answer_so_far(llamacpp: LiveServer):
    """The stream closes at the suspension; the resume sends the chat with the answer so far as the
    assistant's message, which llama.cpp continues: greedy, the answer it gives uninterrupted."""
    plain, pieces = plain_and_resumed(llamacpp, max_tokens=32, cut_at=8)
    assert sum(d.num_tokens for d in pieces) == sum(d.num_tokens for d in plain) == 32
    assert [d.finish_reason for d in pieces if d.finish_reason] == ["length"]
    assert "".join(d.text for d in pieces) == "".join(d.text for d in plain)


def test_a_chat_suspended_in_japanese_resumes_with_what_is_left_of_its_max_tokens(llamacpp: LiveServer):
    """llama.cpp holds back a character's first bytes, so a chunk of Japanese carries two tokens;
    counted one a chunk, the resume asked for more than was left and the answer ran past
    `max_tokens`."""
    ask = "Translate to Japanese: Good morning, how are you today? I like sushi and tea."
    plain, pieces = plain_and_resumed(llamacpp, max_tokens=32, cut_at=6, ask=ask)
    assert max(d.num_tokens for d in plain[:6]) == 2  # the case at hand: chunks of two tokens before the cut
    assert sum(d.num_tokens for d in pieces) == sum(d.num_tokens for d in plain) == 32
    assert "".join(d.text for d in pieces) == "".join(d.text for d in plain)


def test_ollamas_api_runs_on_the_real_model(llamacpp: LiveServer):
    """The `ollama` client streams from llama.cpp through our queue; the prompt is counted as the
    chat API counts the same messages."""
    api = ollama.Client(host=llamacpp.url)
    llamacpp.clients.append(api)  # closed with the server
    messages = [{"role": "user", "content": "Name three colours."}]
    pieces = list(api.chat(model=MODEL, messages=messages, stream=True, options={"num_predict": 12}))
    last = pieces[-1]
    assert last.done and last.done_reason in ("stop", "length") and 1 <= last.eval_count <= 12
    assert "".join(p.message.content or "" for p in pieces)
    chat = ask(llamacpp.client(), "Name three colours.", max_tokens=1)
    assert last.prompt_eval_count == chat.usage.prompt_tokens
    generated = api.generate(model=f"{MODEL}:latest", prompt="Say yes.", options={"num_predict": 4, "temperature": 0})
    assert generated.response and generated.eval_count <= 4


def test_a_text_completion_is_the_one_llama_cpps_own_server_gives(llamacpp: LiveServer):
    """`/v1/completions` continues the prompt as given: the same seeded text and prompt count as
    llama.cpp's own `/v1/completions`, logprobs in the legacy shape."""
    engine = llamacpp.services.engine
    body = {"prompt": "The capital of France is", "max_tokens": 12, "seed": 5}
    own = httpx.post(
        engine._server.listening_address + "/v1/completions", json=body, headers=engine._http.headers, timeout=60
    ).json()
    ours = llamacpp.client().completions.create(model=MODEL, **body, extra_headers={"Cache-Control": "no-store"})
    assert ours.choices[0].text == own["choices"][0]["text"] and ours.choices[0].text
    assert ours.usage is not None and ours.usage.prompt_tokens == own["usage"]["prompt_tokens"]
    for count in (0, 3):
        scored = llamacpp.client().completions.create(model=MODEL, prompt="One, two,", max_tokens=4, logprobs=count)
        given = scored.choices[0].logprobs
        assert given is not None and "".join(given.tokens or ()) == scored.choices[0].text
        assert all(lp is not None and lp <= 0 for lp in given.token_logprobs or ())
        tops = [len(top) for top in given.top_logprobs or ()]  # the alternatives asked for, and the chosen token
        assert tops and all(count <= n <= count + 1 and n >= 1 for n in tops), tops
