"""OpenAI's legacy text completions (`POST /v1/completions`) through the official `openai` client
and LangChain's `OpenAI` LLM against a live server on the simulator (plain and harmony): the prompt
continued as given, whole and streamed, echo, logprobs in the legacy shape; every field we cannot
honour a 400 naming it; and the pipeline's rules (keys, classes, limits, usage, the queue, the
cache) as on chat."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import openai
import pytest
from langchain_openai import OpenAI as LangChainOpenAI

from tests.api.team import KEYS, live  # noqa: F401 - live: the module's server fixture
from tests.conftest import LiveServer, live_server


def client(live: LiveServer, key: str = "sk-alice-0001") -> openai.OpenAI:
    return live.client(api_key=key)


def post(live: LiveServer, body: dict, key: str = "sk-bob-00001", **headers: str) -> httpx.Response:
    return httpx.post(
        live.url + "/v1/completions",
        json={"model": "sim", **body},
        headers={"Authorization": f"Bearer {key}", **headers},
        timeout=60,
    )


def test_a_prompt_is_continued_whole_and_streamed(live: LiveServer) -> None:
    api = client(live)
    whole = api.completions.create(model="sim", prompt="Once upon a time", max_tokens=12)
    choice = whole.choices[0]
    assert whole.object == "text_completion" and whole.id.startswith("cmpl-")
    assert choice.text and choice.finish_reason in ("stop", "length") and choice.logprobs is None
    assert "<|" not in choice.text  # harmony's channels are neither added nor read out of a text completion
    assert whole.usage is not None and 1 <= whole.usage.completion_tokens <= 12 and whole.usage.prompt_tokens > 3
    chunks = list(
        api.completions.create(
            model="sim", prompt="Once upon a time", max_tokens=12, stream=True, stream_options={"include_usage": True}
        )
    )
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert all(c.object == "text_completion" for c in chunks) and "".join(texts)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == len([t for t in texts if t])


def test_max_tokens_left_out_is_sixteen_as_on_openai() -> None:
    with live_server("engine.sim.natural_stop=false", "server.default_max_tokens=100") as live:
        answer = live.client().completions.create(model="sim", prompt="Count:")
    assert answer.usage is not None and answer.usage.completion_tokens == 16
    assert answer.choices[0].finish_reason == "length"


def test_echo_puts_the_prompt_before_the_answer(live: LiveServer) -> None:
    api = client(live)
    whole = api.completions.create(model="sim", prompt="Echo me:", max_tokens=5, echo=True)
    assert whole.choices[0].text.startswith("Echo me:") and len(whole.choices[0].text) > len("Echo me:")
    streamed = [
        c.choices[0].text
        for c in api.completions.create(model="sim", prompt="Echo me:", max_tokens=5, echo=True, stream=True)
    ]
    assert streamed[0] == "Echo me:" and len(streamed) > 2


def test_logprobs_come_in_the_legacy_shape(live: LiveServer) -> None:
    api = client(live)
    answer = api.completions.create(model="sim", prompt="Hello", max_tokens=6, logprobs=2)
    given = answer.choices[0].logprobs
    assert given is not None and given.tokens and "".join(given.tokens) == answer.choices[0].text
    assert (
        len(given.tokens)
        == len(given.token_logprobs or ())
        == len(given.top_logprobs or ())
        == len(given.text_offset or ())
    )
    assert given.text_offset == [sum(len(t) for t in given.tokens[:i]) for i in range(len(given.tokens))]
    assert all(token in top and len(top) <= 3 for token, top in zip(given.tokens, given.top_logprobs or ()))
    streamed = api.completions.create(model="sim", prompt="Hello", max_tokens=6, logprobs=1, stream=True)
    offsets = [
        o for c in streamed if c.choices and c.choices[0].logprobs for o in c.choices[0].logprobs.text_offset or ()
    ]
    assert offsets == sorted(offsets) and offsets[0] == 0 and len(offsets) == len(set(offsets))


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"prompt": ["one", "two"]}, "prompt", "unsupported_parameter"),
        ({"prompt": [1, 2, 3]}, "prompt", "unsupported_parameter"),
        ({"prompt": [[1, 2], [3]]}, "prompt", "unsupported_parameter"),
        ({"prompt": ""}, "prompt", "invalid_value"),
        ({"prompt": []}, "prompt", "invalid_value"),
        ({"prompt": "x", "suffix": "y"}, "suffix", "unsupported_parameter"),
        ({"prompt": "x", "n": 2}, "n", "unsupported_parameter"),
        ({"prompt": "x", "best_of": 3}, "best_of", "unsupported_parameter"),
        ({"prompt": "x", "echo": True, "logprobs": 1}, "echo", "unsupported_parameter"),
        ({"prompt": "x", "logprobs": 21}, "logprobs", "invalid_value"),
        ({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "stop", "invalid_value"),
        ({"prompt": "x", "max_tokens": 4, "min_tokens": 5}, "min_tokens", "invalid_value"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens", "invalid_value"),
        ({"prompt": "x", "max_tokens": 100_000}, "max_tokens", "invalid_value"),
        ({"prompt": "x " * 4_000, "max_tokens": 200}, "prompt", "context_length_exceeded"),
        ({"prompt": "x", "response_format": {"type": "json_object"}}, "response_format", "unsupported_parameter"),
        ({"prompt": "x", "messages": []}, "messages", "unsupported_parameter"),
        ({"prompt": "x", "temperature": "hot"}, "temperature", "invalid_value"),
        ({"model": "gpt-4", "prompt": "x"}, "model", "model_not_found"),
        ({}, "prompt", "invalid_value"),
    ],
)
def test_what_we_cannot_honour_is_a_400_naming_it(live: LiveServer, body: dict, param: str, code: str) -> None:
    response = post(live, body)
    error = response.json()["error"]
    assert response.status_code == (404 if code == "model_not_found" else 400), error
    assert (error["param"], error["code"]) == (param, code), error


def test_keys_classes_limits_and_usage_as_on_chat(live: LiveServer) -> None:
    assert post(live, {"prompt": "x"}, key="sk-unknown-01").status_code == 401
    low = post(live, {"prompt": "x", "max_tokens": 3}, **{"X-Priority": "low"})
    assert low.status_code == 200 and low.headers["x-priority"] == "low"
    before = live.services.pipeline.usage.report(0, 2**40)["bob"]
    answer = post(live, {"prompt": "y", "max_tokens": 3}).json()
    after = live.services.pipeline.usage.report(0, 2**40)["bob"]
    assert after.requests == before.requests + 1
    assert after.completion_tokens == before.completion_tokens + answer["usage"]["completion_tokens"]
    assert post(live, {"prompt": "one", "max_tokens": 3}, key="sk-slow-0001").status_code == 200
    limited = post(live, {"prompt": "two", "max_tokens": 3}, key="sk-slow-0001")
    assert limited.status_code == 429 and limited.headers["retry-after"]


def test_a_waiting_stream_carries_its_place() -> None:
    with live_server(KEYS, "scheduler.max_concurrency=1", "engine.sim.token_latency_ms=10") as live:
        live.status_key = "sk-ops-00001"
        hold = threading.Thread(target=lambda: post(live, {"prompt": "hold", "max_tokens": 250}))
        hold.start()
        live.wait_for(lambda s: s["running"] == 1)
        body = {"model": "sim", "prompt": "me", "max_tokens": 5, "stream": True}
        with httpx.stream(
            "POST",
            live.url + "/v1/completions",
            json=body,
            timeout=60,
            headers={"Authorization": "Bearer sk-bob-00001"},
        ) as response:
            lines = [line for line in response.iter_lines() if line]
        hold.join(60)
    assert lines[0].startswith(": queue position=1")
    assert lines[-1] == "data: [DONE]" and any(line.startswith(": dispatched") for line in lines)


def test_cached_apart_from_chat_and_exact_only(tmp_path: Path) -> None:
    """A repeated text completion is a hit; a chat whose message is the same text is not (its
    prompt is the chat template's), and a prompt that differs a little gets no other's answer."""
    cache = ("cache.enabled=true", f"cache.path={tmp_path / 'cache.sqlite3'}", "cache.similar.enabled=true")
    cache += ("cache.normalize=true", "cache.casefold=true")  # chats' keys, never a prompt's
    with live_server(*cache) as live:
        ask = {"prompt": "What is the capital of France?", "max_tokens": 8, "temperature": 0}
        first, again = post(live, ask), post(live, ask)
        chat = httpx.post(
            live.url + "/v1/chat/completions",
            json={
                "model": "sim",
                "messages": [{"role": "user", "content": ask["prompt"]}],
                "max_tokens": 8,
                "temperature": 0,
            },
            timeout=60,
        )
        nearly = ("What is the capital of France ?", "what is the  capital of France? ")
        near = [post(live, {**ask, "prompt": p}).headers["x-cache"] for p in nearly]
    assert (first.headers["x-cache"], again.headers["x-cache"]) == ("MISS", "HIT")
    assert again.json()["choices"][0]["text"] == first.json()["choices"][0]["text"]
    assert chat.headers["x-cache"] == "MISS" and near == ["MISS", "MISS"]


def test_langchains_openai_llm_runs_unchanged(live: LiveServer) -> None:
    llm = LangChainOpenAI(base_url=live.url + "/v1", api_key="sk-alice-0001", model="sim", max_tokens=10)
    said = llm.invoke("Tell me a joke.")
    assert isinstance(said, str) and said
    assert "".join(llm.stream("Tell me a joke."))


def test_batch_mode_is_low_and_answered_whole(live: LiveServer) -> None:
    batch = httpx.post(
        live.url + "/v1/completions?mode=batch",
        json={"model": "sim", "prompt": "x", "max_tokens": 3, "stream": True},
        headers={"Authorization": "Bearer sk-bob-00001"},
        timeout=60,
    )
    assert batch.headers["x-priority"] == "low" and batch.json()["object"] == "text_completion"
    odd = httpx.post(
        live.url + "/v1/completions?mode=later",
        json={"model": "sim", "prompt": "x"},
        headers={"Authorization": "Bearer sk-bob-00001"},
        timeout=60,
    )
    assert odd.status_code == 400 and odd.json()["error"]["param"] == "mode"


def test_logprobs_zero_shows_the_chosen_token_only(live: LiveServer) -> None:
    given = client(live).completions.create(model="sim", prompt="Hello", max_tokens=4, logprobs=0).choices[0].logprobs
    assert given is not None and given.top_logprobs == [
        {t: lp} for t, lp in zip(given.tokens or (), given.token_logprobs or ())
    ]
