"""gpt-oss answers in channels: the reasoning apart from the answer, through a real server on the
simulator in harmony mode (an analysis message, then a final one, with their special tokens)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import LiveServer, live_server

MESSAGES = [{"role": "user", "content": "Hello there"}]
HARMONY = ["engine.sim.harmony=true", "engine.sim.natural_stop=true"]


@pytest.fixture(scope="module")
def harmony(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    cache = tmp_path_factory.mktemp("cache") / "c.sqlite3"
    with live_server(*HARMONY, "cache.enabled=true", f"cache.path={cache}") as live:
        yield live


def test_the_answer_and_the_reasoning_come_apart(harmony: LiveServer) -> None:
    completion = harmony.client().chat.completions.create(model="sim", messages=MESSAGES, max_tokens=400, seed=3)
    message = completion.choices[0].message
    assert message.content and message.reasoning_content
    for text in (message.content, message.reasoning_content):
        assert "<|" not in text and "|>" not in text and "analysis" not in text.split()[:1]
    details = completion.usage.completion_tokens_details
    assert 0 < details.reasoning_tokens < completion.usage.completion_tokens
    assert completion.choices[0].finish_reason == "stop"


def test_streaming_carries_both_and_matches_the_whole(harmony: LiveServer) -> None:
    client = harmony.client()
    whole = client.chat.completions.create(
        model="sim", messages=MESSAGES, max_tokens=400, seed=4, extra_body={"cache": False}
    )
    chunks = list(
        client.chat.completions.create(
            model="sim",
            messages=MESSAGES,
            max_tokens=400,
            seed=4,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"cache": False},
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    reasoning = "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
    content = "".join(d.content or "" for d in deltas)
    assert reasoning == whole.choices[0].message.reasoning_content
    assert content == whole.choices[0].message.content
    first_answer = next(i for i, d in enumerate(deltas) if d.content)
    assert all(not getattr(d, "reasoning_content", None) for d in deltas[first_answer:])  # thinking comes first
    counted = whole.usage.completion_tokens_details.reasoning_tokens
    assert chunks[-1].usage.completion_tokens_details.reasoning_tokens == counted


def test_include_reasoning_false_drops_it_but_counts_it(harmony: LiveServer) -> None:
    body = {"model": "sim", "messages": MESSAGES, "max_tokens": 400, "seed": 5, "include_reasoning": False}
    with harmony.http() as http:
        whole = http.post("/v1/chat/completions", json=body).json()
        stream = http.post("/v1/chat/completions", json={**body, "stream": True}).text
    assert "reasoning_content" not in whole["choices"][0]["message"] and whole["choices"][0]["message"]["content"]
    assert whole["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0
    assert "reasoning_content" not in stream and '"content"' in stream


def test_the_cache_keeps_both_parts(harmony: LiveServer) -> None:
    client = harmony.client()
    first = client.chat.completions.with_raw_response.create(
        model="sim", messages=MESSAGES, max_tokens=400, temperature=0
    )
    again = client.chat.completions.with_raw_response.create(
        model="sim", messages=MESSAGES, max_tokens=400, temperature=0, stream=True
    )
    assert first.headers["x-cache"] == "MISS" and again.headers["x-cache"] == "HIT"
    stored = first.parse().choices[0].message
    deltas = [c.choices[0].delta for c in again.parse() if c.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == stored.reasoning_content
    assert "".join(d.content or "" for d in deltas) == stored.content


def test_a_model_without_channels_is_unchanged(server: LiveServer) -> None:
    body = {"model": "sim", "messages": MESSAGES, "max_tokens": 20, "temperature": 0}
    with server.http() as http:
        whole = http.post("/v1/chat/completions", json=body).json()
    message = whole["choices"][0]["message"]
    assert set(message) == {"role", "content", "refusal"} and len(message["content"].split()) == 20
    assert whole["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}
