"""The real vLLM engine (CPU build, bundled SmolLM2) behind the real server: one engine for the
whole run. Checks structure, never facts: the small model's answers are often wrong."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from engine.vllm_engine import has_harmony_tokens
from tests.engine.resume import plain_and_resumed

pytestmark = pytest.mark.vllm

HI = [{"role": "user", "content": "Say hello."}]


def four_tokens(server, **fields) -> httpx.Response:
    body = {"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return httpx.post(server.url + "/v1/chat/completions", timeout=30, json={**body, **fields})


def test_chat_completion_non_streaming_and_streaming(vllm_server):
    client = vllm_server.client()
    reply = client.chat.completions.create(model="smollm2-135m-instruct", messages=HI, max_tokens=16, temperature=0)
    assert reply.object == "chat.completion" and reply.choices[0].message.content.strip()
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert 0 < reply.usage.completion_tokens <= 16 and reply.usage.prompt_tokens > 5
    chunks = list(
        client.chat.completions.create(
            model="smollm2-135m-instruct",
            messages=HI,
            max_tokens=16,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    assert 0 < chunks[-1].usage.completion_tokens <= 16
    # SmolLM2 has no harmony channels: its text passes untouched, with no reasoning
    assert not has_harmony_tokens(vllm_server.services.engine._tokenizer)
    assert getattr(reply.choices[0].message, "reasoning_content", None) is None
    assert reply.usage.completion_tokens_details.reasoning_tokens == 0
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")


def test_length_finish_and_usage_are_the_engines(vllm_server):
    reply = vllm_server.client().chat.completions.create(
        model="smollm2-135m-instruct",
        messages=[{"role": "user", "content": "Write a long story about a cat."}],
        max_tokens=7,
        temperature=0,
    )
    assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 7


def test_a_stop_sequence_is_named_by_the_messages_api(vllm_server):
    """vLLM says which stop string matched (its `stop_reason`): Anthropic's `stop_sequence`."""
    asked = {
        "model": "smollm2-135m-instruct",
        "max_tokens": 24,
        "temperature": 0,
        "messages": [{"role": "user", "content": "Name five colours."}],
    }
    free = httpx.post(vllm_server.url + "/v1/messages", json=asked, timeout=120).json()
    words = [w for w in free["content"][-1]["text"].split() if len(w) > 2]
    stop = words[len(words) // 2]
    for stream in (False, True):
        response = httpx.post(
            vllm_server.url + "/v1/messages", json={**asked, "stop_sequences": [stop], "stream": stream}, timeout=120
        )
        end = (
            response.json()
            if not stream
            else next(json.loads(line[6:])["delta"] for line in response.text.splitlines() if '"message_delta"' in line)
        )
        assert (end["stop_reason"], end["stop_sequence"]) == ("stop_sequence", stop), response.text


def test_priority_reaches_the_engine(vllm_server):
    """One engine slot: a high request sent after four low ones runs right after the running one."""
    url = vllm_server.url
    done: list[str] = []

    def send(name: str, priority: str, max_tokens: int) -> None:
        body = {
            "model": "smollm2-135m-instruct",
            "messages": [{"role": "user", "content": f"Count slowly: {name}"}],
            "max_tokens": max_tokens,
            "temperature": 0.7,
        }
        response = httpx.post(url + "/v1/chat/completions", json=body, headers={"X-Priority": priority}, timeout=120)
        assert response.status_code == 200, response.text
        done.append(name)

    threads = [threading.Thread(target=send, args=("first", "low", 48))]
    threads[0].start()
    # ours says "first" runs at once; the engine's figure is sampled and may still show the last test's request
    vllm_server.wait_for(lambda s: s["running"] == 1 and s["engine"] and s["engine"]["running"] == 1, timeout=30)
    for i in range(4):
        threads.append(threading.Thread(target=send, args=(f"low{i}", "low", 24)))
        threads[-1].start()
    # one low waits in vLLM (the others in our queue: lower prompts prefill one at a time on a CPU),
    # so the high can only come second if vLLM's priority policy lets it overtake that low
    vllm_server.wait_for(
        lambda s: s["engine"] and s["engine"]["waiting"] >= 1 and s["engine"]["waiting"] + s["waiting"]["low"] == 4,
        timeout=30,
    )
    threads.append(threading.Thread(target=send, args=("high", "high", 24)))
    threads[-1].start()
    for t in threads:
        t.join(180)
    assert done[:2] == ["first", "high"], done


def test_disconnect_aborts_in_the_engine(vllm_server):
    body = {
        "model": "smollm2-135m-instruct",
        "messages": [{"role": "user", "content": "Tell me everything about the ocean."}],
        "max_tokens": 1500,
        "stream": True,
        "temperature": 0.8,
    }
    with httpx.stream("POST", vllm_server.url + "/v1/chat/completions", json=body, timeout=60) as response:
        seen = 0
        for line in response.iter_lines():
            seen += line.startswith("data:")
            if seen >= 3:
                break
    engine = vllm_server.services.engine
    deadline = time.monotonic() + 10
    while engine._engine.get_num_unfinished_requests() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine._engine.get_num_unfinished_requests() == 0
    assert vllm_server.status()["running"] == 0


def test_repeated_long_prompt_hits_the_prefix_cache(vllm_server):
    long_prompt = " ".join(f"Fact {i}: the queue keeps requests in order." for i in range(60))
    messages = [{"role": "system", "content": long_prompt}, {"role": "user", "content": "Summarise."}]
    client = vllm_server.client()
    first = client.chat.completions.create(model="smollm2-135m-instruct", messages=messages, max_tokens=4)
    second = client.chat.completions.create(model="smollm2-135m-instruct", messages=messages, max_tokens=4)
    assert first.usage.prompt_tokens > 300
    assert second.usage.prompt_tokens_details.cached_tokens >= 256
    assert vllm_server.status()["engine"]["prefix_cache_hit_rate"] > 0


def test_context_limit_is_rejected_before_the_engine(vllm_server):
    engine = vllm_server.services.engine
    before = engine.stats().generated_tokens
    huge = "word " * 2500
    response = httpx.post(
        vllm_server.url + "/v1/chat/completions",
        json={"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": huge}], "max_tokens": 10},
        timeout=30,
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"
    assert engine.stats().generated_tokens == before and vllm_server.status()["running"] == 0


def test_a_seed_is_a_400_on_the_cpu_build(vllm_server):
    """Its engine process dies on a seeded request whose prompt it prefills in parts."""
    for seed in (0, 7):
        response = four_tokens(vllm_server, seed=seed)
        assert response.status_code == 400
        assert response.json()["error"]["param"] == "seed"
        assert response.json()["error"]["code"] == "unsupported_parameter"


def test_reasoning_effort_is_accepted_and_reported_ignored(vllm_server):
    response = httpx.post(
        vllm_server.url + "/v1/chat/completions",
        json={"model": "smollm2-135m-instruct", "messages": HI, "max_tokens": 4, "reasoning_effort": "high"},
        timeout=60,
    )
    assert response.status_code == 200
    assert response.headers["x-reasoning-effort"] == "ignored"


def test_queue_status_reports_the_engine(vllm_server):
    status = vllm_server.status()
    assert status["token_budget"] > 2048 and status["engine"]["kv_usage"] >= 0
    assert status["lower_prefills"] == 1  # vLLM on a CPU prefills on the threads that decode
    assert status["burst_prefills"] == 4  # ...and gains by prefilling a burst's prompts together
    models = vllm_server.client().models.list()
    assert [m.id for m in models.data] == ["smollm2-135m-instruct"]


def test_a_suspended_sequence_resumes_where_it_stopped(vllm_server):
    """vLLM's request is aborted at the suspension and a new one, prompted with the answer so far,
    goes on after the resume: greedy, the answer is the one it gets uninterrupted."""
    plain, pieces = plain_and_resumed(vllm_server, max_tokens=24, cut_at=6)
    assert sum(d.num_tokens for d in pieces) == sum(d.num_tokens for d in plain) == 24
    assert [d.finish_reason for d in pieces if d.finish_reason] == ["length"]  # no abort reached the stream
    assert "".join(d.text for d in pieces) == "".join(d.text for d in plain)
    assert vllm_server.services.engine._engine.get_num_unfinished_requests() == 0


def test_a_value_the_engine_refuses_is_a_400_not_a_500(vllm_server):
    """vLLM validates a token id in `logit_bias` against the vocabulary only when it runs."""
    response = four_tokens(vllm_server, logit_bias={"999999999": 1})
    assert response.status_code == 400, response.text
    assert vllm_server.status()["running"] == 0


def test_a_prompt_is_templated_and_tokenized_off_the_event_loop(vllm_server, monkeypatch):
    """A body may carry 1 MiB of text: on the loop, every stream of the server waited for it."""
    engine = vllm_server.services.engine
    seen: list[str] = []
    real = engine._token_ids

    def watched(*args):
        seen.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(engine, "_token_ids", watched)
    response = httpx.post(
        vllm_server.url + "/v1/chat/completions",
        timeout=30,
        json={"model": "smollm2-135m-instruct", "messages": HI, "max_tokens": 2},
    )
    assert response.status_code == 200 and seen and all(name.startswith("vllm-prompt") for name in seen)


def test_a_text_completion_continues_the_prompt_as_given(vllm_server):
    """No chat template: the prompt's count is the tokenizer's own (special tokens as vLLM's
    `/v1/completions` adds them), and the greedy text is the engine's."""
    client = vllm_server.client()
    prompt = "The capital of France is"
    answer = client.completions.create(model="smollm2-135m-instruct", prompt=prompt, max_tokens=6, temperature=0)
    tokenizer = vllm_server.services.engine._tokenizer
    assert answer.usage.prompt_tokens == len(tokenizer.encode(prompt, add_special_tokens=True))
    assert answer.choices[0].text and answer.usage.completion_tokens <= 6
    chat = four_tokens(vllm_server, messages=[{"role": "user", "content": prompt}]).json()
    assert chat["usage"]["prompt_tokens"] > answer.usage.prompt_tokens + 5  # the template's tokens
    streamed = client.completions.create(
        model="smollm2-135m-instruct", prompt=prompt, max_tokens=6, temperature=0, stream=True, echo=True
    )
    assert "".join(c.choices[0].text for c in streamed if c.choices) == prompt + answer.choices[0].text
