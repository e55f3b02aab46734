"""The chat API through a real server and the official openai client."""

from __future__ import annotations

import httpx
import openai
import pytest

MESSAGES = [{"role": "user", "content": "Say something about queues."}]


def test_non_streaming_completion_follows_the_openai_schema(server):
    client = server.client()
    response = client.chat.completions.with_raw_response.create(
        model="sim", messages=MESSAGES, max_tokens=12, temperature=0
    )
    completion = response.parse()
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.role == "assistant"
    assert response.http_response.json()["choices"][0]["message"]["refusal"] is None  # required by the schema
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage.completion_tokens <= 12
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
    assert response.headers["x-request-id"] == completion.id
    assert response.headers["x-priority"] == "medium"  # the bonus raises the score, not the class
    assert int(response.headers["x-queue-wait-ms"]) >= 0


def test_streaming_matches_non_streaming_text_at_temperature_zero(server):
    client = server.client()
    whole = client.chat.completions.create(model="sim", messages=MESSAGES, max_tokens=30, temperature=0, seed=7)
    stream = client.chat.completions.create(
        model="sim",
        messages=MESSAGES,
        max_tokens=30,
        temperature=0,
        seed=7,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert len({c.id for c in chunks}) == 1


def test_text_parts_and_stop_sequences(server):
    client = server.client()
    full = client.chat.completions.create(
        model="sim",
        temperature=0,
        max_tokens=40,
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": " two"}]},
        ],
    )
    words = full.choices[0].message.content.split()
    assert len(words) > 3
    stopped = client.chat.completions.create(
        model="sim",
        temperature=0,
        max_tokens=40,
        stop=[" " + words[3]],
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": " two"}]},
        ],
    )
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].message.content == " ".join(words[:3])


def test_request_id_from_body_or_header_is_echoed(server):
    client = server.client()
    completion = client.chat.completions.create(
        model="sim", messages=MESSAGES, max_tokens=3, extra_body={"request_id": "job-42"}
    )
    assert completion.id == "job-42"
    response = httpx.post(
        server.url + "/v1/chat/completions",
        headers={"X-Request-ID": "hdr-7"},
        json={"model": "sim", "messages": MESSAGES, "max_tokens": 3},
    )
    assert response.json()["id"] == "hdr-7" and response.headers["x-request-id"] == "hdr-7"
    assert server.status(request_id="hdr-7")["state"] == "finished"
    assert server.status(request_id="never-seen")["state"] == "unknown"


def test_models_and_health(server):
    models = server.client().models.list()
    assert [m.id for m in models.data] == ["sim"]
    health = httpx.get(server.url + "/healthz")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert "x-request-id" in health.headers


def test_health_is_503_while_the_engine_loads(make_server):
    live = make_server("engine.sim.startup_s=1.5", wait_ready=False)
    health = httpx.get(live.url + "/healthz")
    assert health.status_code == 503 and health.json()["status"] == "loading"
    chat = httpx.post(live.url + "/v1/chat/completions", json={"model": "sim", "messages": MESSAGES})
    assert chat.status_code == 503 and chat.json()["error"]["code"] == "engine_loading"
    assert chat.headers["retry-after"] == "5"
    live.wait_for(lambda s: s["engine_ready"])
    assert httpx.get(live.url + "/healthz").status_code == 200


def test_batch_mode_is_low_priority_and_not_streamed(server):
    response = httpx.post(
        server.url + "/v1/chat/completions?mode=batch",
        json={"model": "sim", "messages": MESSAGES, "max_tokens": 5, "stream": True},
    )
    assert response.status_code == 200
    assert response.headers["x-priority"] == "low"
    assert response.json()["object"] == "chat.completion"


def test_openai_client_raises_on_errors(server):
    with pytest.raises(openai.NotFoundError) as err:
        server.client().chat.completions.create(model="nope", messages=MESSAGES)
    assert err.value.body["code"] == "model_not_found"
