"""Scheduling seen from outside: order, rejection, timeouts, disconnects and queue notices."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest

SLOW = ("scheduler.max_concurrency=1", "engine.sim.token_latency_ms=20")


def chat(url: str, *, max_tokens: int = 5, headers: dict | None = None, timeout: float = 30, **body) -> httpx.Response:
    payload = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens, **body}
    return httpx.post(url + "/v1/chat/completions", json=payload, headers=headers or {}, timeout=timeout)


def in_thread(fn, *args, **kwargs) -> dict:
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(result=fn(*args, **kwargs), done=time.monotonic()))
    thread.start()
    box["thread"] = thread
    return box


def test_priority_order_end_to_end(make_server):
    live = make_server(*SLOW)
    blocker = in_thread(chat, live.url, max_tokens=40)
    live.wait_for(lambda s: s["running"] == 1)
    boxes = {}
    for cls in ("low", "medium", "high"):
        boxes[cls] = in_thread(chat, live.url, headers={"X-Priority": cls})
        live.wait_for(lambda s, n=len(boxes): s["waiting_total"] == n)  # noqa: B008
    for box in [blocker, *boxes.values()]:
        box["thread"].join(30)
    assert all(b["result"].status_code == 200 for b in boxes.values())
    assert boxes["high"]["done"] < boxes["medium"]["done"] < boxes["low"]["done"]
    assert [boxes[c]["result"].headers["x-priority"] for c in ("low", "medium", "high")] == ["low", "medium", "high"]
    assert int(boxes["low"]["result"].headers["x-queue-wait-ms"]) > int(
        boxes["high"]["result"].headers["x-queue-wait-ms"]
    )


def test_full_queue_gets_429_with_retry_after(make_server):
    live = make_server(*SLOW, "scheduler.max_queue_size=1")
    blocker = in_thread(chat, live.url, max_tokens=30)
    live.wait_for(lambda s: s["running"] == 1)
    queued = in_thread(chat, live.url)
    live.wait_for(lambda s: s["waiting_total"] == 1)
    with pytest.raises(openai.RateLimitError) as err:
        live.client().chat.completions.create(model="sim", messages=[{"role": "user", "content": "x"}])
    assert err.value.body["code"] == "queue_full" and err.value.body["type"] == "rate_limit_error"
    assert int(err.value.response.headers["retry-after"]) >= 1
    for box in (blocker, queued):
        box["thread"].join(30)
        assert box["result"].status_code == 200


def test_high_request_displaces_the_newest_low_waiter(make_server):
    live = make_server(*SLOW, "scheduler.max_queue_size=1")
    blocker = in_thread(chat, live.url, max_tokens=30)
    live.wait_for(lambda s: s["running"] == 1)
    low = in_thread(chat, live.url, headers={"X-Priority": "low"})
    live.wait_for(lambda s: s["waiting"]["low"] == 1)
    high = chat(live.url, headers={"X-Priority": "high"})
    low["thread"].join(30)
    blocker["thread"].join(30)
    assert high.status_code == 200
    rejected = low["result"]
    assert rejected.status_code == 429 and rejected.json()["error"]["code"] == "queue_displaced"
    assert int(rejected.headers["retry-after"]) >= 1


def test_low_requests_time_out_in_the_queue(make_server):
    live = make_server(*SLOW, "scheduler.max_wait_s.low=0.3")
    blocker = in_thread(chat, live.url, max_tokens=60)
    live.wait_for(lambda s: s["running"] == 1)
    started = time.monotonic()
    response = chat(live.url, headers={"X-Priority": "low"})
    assert response.status_code == 429 and response.json()["error"]["code"] == "queue_timeout"
    assert 0.3 <= time.monotonic() - started < 5
    assert response.headers["x-priority"] == "low" and "retry-after" in response.headers
    blocker["thread"].join(30)


def test_queue_status_while_waiting(make_server):
    live = make_server(*SLOW)
    blocker = in_thread(chat, live.url, max_tokens=30, request_id="blocker")
    live.wait_for(lambda s: s["running"] == 1)
    waiting = in_thread(chat, live.url, request_id="second", headers={"X-Priority": "low"})
    status = live.wait_for(lambda s: s["waiting_total"] == 1)
    assert status["waiting"] == {"high": 0, "medium": 0, "low": 1}
    assert status["slots"] == 1 and status["free_slots"] == 0 and status["emergency"] is False
    assert set(status["estimated_wait_s"]) == {"high", "medium", "low"}
    mine = live.status(request_id="second")
    assert mine["state"] == "queued" and mine["position"] == 1 and mine["priority"] == "low"
    assert mine["waited_s"] >= 0
    assert live.status(request_id="blocker")["state"] == "running"
    for box in (blocker, waiting):
        box["thread"].join(30)
    assert live.status(request_id="second")["state"] == "finished"


def test_streams_get_queue_comments_while_waiting(make_server):
    live = make_server(*SLOW)
    blocker = in_thread(chat, live.url, max_tokens=120)
    live.wait_for(lambda s: s["running"] == 1)
    payload = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True}
    comments, data = [], []
    with httpx.stream("POST", live.url + "/v1/chat/completions", json=payload, timeout=30) as response:
        assert response.status_code == 200 and int(response.headers["x-queue-wait-ms"]) >= 900
        for line in response.iter_lines():
            (comments if line.startswith(":") else data).append(line)
    notices = [c for c in comments if c.startswith(": queue position=")]
    assert notices and notices[0].startswith(": queue position=1 estimated_wait_s=")
    assert any(c.startswith(": dispatched queue_wait_ms=") for c in comments)
    assert [d for d in data if d][-1] == "data: [DONE]"
    blocker["thread"].join(30)


def test_openai_client_ignores_queue_comments(make_server):
    live = make_server(*SLOW)
    blocker = in_thread(chat, live.url, max_tokens=80)
    live.wait_for(lambda s: s["running"] == 1)
    stream = live.client().chat.completions.create(
        model="sim", messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True
    )
    chunks = list(stream)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert "".join(c.choices[0].delta.content or "" for c in chunks).strip()
    blocker["thread"].join(30)


def test_non_streaming_disconnect_frees_the_slot(make_server):
    live = make_server(*SLOW)
    with pytest.raises(httpx.ReadTimeout):
        chat(live.url, max_tokens=2000, timeout=0.5)
    live.wait_for(lambda s: s["running"] == 0, timeout=5)
    assert live.services.engine.stats().running == 0
    assert chat(live.url).status_code == 200


def test_streaming_disconnect_frees_the_slot(make_server):
    live = make_server(*SLOW)
    payload = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2000, "stream": True}
    with httpx.stream("POST", live.url + "/v1/chat/completions", json=payload, timeout=30) as response:
        for line in response.iter_lines():
            if line.startswith("data:"):
                break
    live.wait_for(lambda s: s["running"] == 0, timeout=5)
    assert live.services.engine.stats().running == 0


def test_waiting_stream_that_disconnects_leaves_the_queue(make_server):
    live = make_server(*SLOW)
    blocker = in_thread(chat, live.url, max_tokens=200)
    live.wait_for(lambda s: s["running"] == 1)
    payload = {
        "model": "sim",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 3,
        "stream": True,
        "request_id": "leaver",
    }
    with httpx.stream("POST", live.url + "/v1/chat/completions", json=payload, timeout=30) as response:
        for line in response.iter_lines():
            if line.startswith(": queue"):
                break
    live.wait_for(lambda s: s["waiting_total"] == 0, timeout=5)
    assert live.status(request_id="leaver")["outcome"] == "disconnect"
    blocker["thread"].join(30)


def test_a_stream_that_could_not_start_in_time_gets_429_before_any_byte(make_server):
    live = make_server(*SLOW, "scheduler.max_wait_s.low=1")
    assert chat(live.url, max_tokens=100).status_code == 200  # 2 s of service: the drain rate is now known
    blocker = in_thread(chat, live.url, max_tokens=300)
    live.wait_for(lambda s: s["running"] == 1)
    payload = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True}
    started = time.monotonic()
    with httpx.stream(
        "POST", live.url + "/v1/chat/completions", json=payload, headers={"X-Priority": "low"}, timeout=30
    ) as response:
        body = response.read()
    assert time.monotonic() - started < 0.9  # decided at the door, not after waiting
    assert response.status_code == 429 and response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == "queue_wait_limit" and int(response.headers["retry-after"]) >= 1
    assert b"data:" not in body
    assert 'gptoss_requests_rejected_total{priority="low",reason="wait_limit"} 1.0' in metrics(live)
    blocker["thread"].join(30)


def test_a_stream_that_opened_waits_past_its_limit_and_is_served(make_server):
    """Accepted means served: its client has a 200 and could not retry a 429."""
    live = make_server(*SLOW, "scheduler.max_wait_s.low=1.5")  # nothing finished yet: the door cannot predict
    blocker = in_thread(chat, live.url, max_tokens=200)
    live.wait_for(lambda s: s["running"] == 1)
    payload = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True}
    started = time.monotonic()
    with httpx.stream(
        "POST", live.url + "/v1/chat/completions", json=payload, headers={"X-Priority": "low"}, timeout=30
    ) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data:")]
    assert response.status_code == 200 and lines[-1] == "data: [DONE]"
    assert time.monotonic() - started > 1.5  # past its class's limit
    text = metrics(live)
    assert 'gptoss_requests_failed_in_stream_total{priority="low"' not in text
    assert 'gptoss_requests_timed_out_total{priority="low"} 1.0' not in text
    blocker["thread"].join(30)


def metrics(live) -> str:
    return httpx.get(live.url + "/metrics", timeout=10).text


def test_idle_waits_show_in_the_status_and_the_metrics(make_server):
    """A low request held back by the slots kept for high while a slot stands free: its wait is an
    idle wait of the low class, in /v1/queue/status and in Prometheus."""
    live = make_server(
        "scheduler.max_concurrency=2",
        "scheduler.limit.adaptive=false",
        "scheduler.limit.high_reserve=0.5",
        "engine.sim.token_latency_ms=20",
    )
    first = in_thread(chat, live.url, max_tokens=40, headers={"X-Priority": "low"})
    live.wait_for(lambda s: s["running"] == 1)
    second = in_thread(chat, live.url, max_tokens=2, headers={"X-Priority": "low"})
    live.wait_for(lambda s: s["waiting_total"] == 1)
    idle = live.wait_for(lambda s: s["idle_wait_s"]["low"] > 0.2)["idle_wait_s"]
    assert idle["high"] == idle["medium"] == 0.0
    for box in (first, second):
        box["thread"].join(30)
    assert 'gptoss_queue_idle_wait_seconds_total{priority="low"}' in metrics(live)


def test_a_high_takes_a_running_lows_slot_and_the_low_goes_on_where_it_stopped(make_server):
    """One slot: a high arriving mid-answer starts at once, the low's stream pauses (queue notices)
    and ends with the very answer it gets alone, its tokens counted once."""
    live = make_server(*SLOW, "scheduler.limit.adaptive=false")
    body = {
        "model": "sim",
        "messages": [{"role": "user", "content": "tell me a story"}],
        "max_tokens": 60,
        "seed": 5,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks, high = [], None
    with httpx.stream(
        "POST", live.url + "/v1/chat/completions", json=body, headers={"X-Priority": "low"}, timeout=30
    ) as response:
        for line in response.iter_lines():
            chunks.append(line)
            if high is None and sum(c.startswith("data:") for c in chunks) == 5:
                high = in_thread(chat, live.url, max_tokens=80, headers={"X-Priority": "high"})
                live.wait_for(lambda s: s["taken_back"] == 1)
    ended = time.monotonic()
    high["thread"].join(30)
    assert high["result"].status_code == 200 and high["done"] < ended
    data = [json.loads(c[5:]) for c in chunks if c.startswith("data:") and c != "data: [DONE]"]
    text = "".join(d["choices"][0]["delta"].get("content") or "" for d in data if d["choices"])
    assert any(c.startswith(": queue position") for c in chunks[5:])  # told where it stands while it waits
    alone = chat(live.url, max_tokens=60, seed=5, messages=body["messages"], headers={"X-Priority": "low"}).json()
    assert text == alone["choices"][0]["message"]["content"]
    assert data[-1]["usage"]["completion_tokens"] == alone["usage"]["completion_tokens"] == 60
    served = [line for line in metrics(live).splitlines() if line.startswith("gptoss_caller_tokens_total{")]
    assert 'gptoss_caller_tokens_total{caller="anonymous",kind="completion"} 200.0' in served  # 60 + 80 + 60
    assert "gptoss_slots_taken_back_total 1.0" in metrics(live)
