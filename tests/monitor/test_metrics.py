"""GET /metrics under a scripted load on the simulator, through the real server."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.monitor.helpers import SLOW, Scrape, chat, in_thread, joined, poll_metrics

CLASSES = ("high", "medium", "low")


def test_counters_histograms_and_tokens_follow_the_requests(make_server):
    live = make_server()
    before = Scrape(live.url)
    assert before.get("gptoss_generated_tokens_total") == 0
    plan = {"high": [3, 4], "medium": [5], "low": [6, 7, 8]}
    for cls, sizes in plan.items():
        for n in sizes:
            response = chat(live.url, max_tokens=n, headers={"X-Priority": cls})
            assert response.status_code == 200
            assert response.json()["usage"]["completion_tokens"] == n
    after = Scrape(live.url)
    for cls, sizes in plan.items():
        assert after.get("gptoss_requests_admitted_total", priority=cls) == len(sizes)
        waits = after.get("gptoss_queue_wait_seconds_sum", priority=cls)
        ttft = after.get("gptoss_time_to_first_token_seconds_sum", priority=cls)
        duration = after.get("gptoss_request_duration_seconds_sum", priority=cls)
        for name in (
            "gptoss_queue_wait_seconds",
            "gptoss_time_to_first_token_seconds",
            "gptoss_request_duration_seconds",
        ):
            assert after.get(f"{name}_count", priority=cls) == len(sizes), name
            assert after.get(f"{name}_bucket", priority=cls, le="+Inf") == len(sizes), name
        # each request waits, then gets its first token, then its last; nothing here takes seconds
        assert 0 <= waits <= ttft <= duration < 5 * len(sizes)
        assert duration > 0
    assert after.get("gptoss_generated_tokens_total") == sum(sum(s) for s in plan.values())
    assert after.get("gptoss_requests_rejected_total", priority="medium", reason="queue_full") == 0
    assert after.get("gptoss_requests_running") == 0
    assert all(after.get("gptoss_requests_waiting", priority=c) == 0 for c in CLASSES)
    assert after.get("gptoss_emergency_mode") == 0 and after.get("gptoss_admission_paused") == 0
    assert 0 <= after.get("gptoss_engine_kv_cache_usage_ratio") <= 1
    assert after.value("gptoss_engine_kv_cache_usage_ratio") is not None


def test_queue_full_rejection_is_counted(make_server):
    live = make_server(*SLOW, "scheduler.max_queue_size=1")
    blocker = in_thread(chat, live.url, max_tokens=80)
    live.wait_for(lambda s: s["running"] == 1)
    queued = in_thread(chat, live.url)
    live.wait_for(lambda s: s["waiting_total"] == 1)
    refused = chat(live.url, headers={"X-Priority": "low"})
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "queue_full"
    scrape = Scrape(live.url)
    assert scrape.get("gptoss_requests_rejected_total", priority="low", reason="queue_full") == 1
    assert not [
        s for s in scrape.families["gptoss_requests_accepted_then_failed"].samples if s.name.endswith("_total")
    ]  # refused at the door is not accepted
    assert scrape.get("gptoss_requests_admitted_total", priority="low") == 0
    assert joined(blocker).status_code == 200 and joined(queued).status_code == 200
    scrape = Scrape(live.url)
    assert scrape.get("gptoss_requests_admitted_total", priority="medium") == 2
    assert scrape.get("gptoss_requests_rejected_total", priority="low", reason="queue_full") == 1


def test_queue_timeout_is_counted(make_server):
    live = make_server(*SLOW, "scheduler.max_wait_s.low=0.3")
    blocker = in_thread(chat, live.url, max_tokens=80)
    live.wait_for(lambda s: s["running"] == 1)
    response = chat(live.url, headers={"X-Priority": "low"})
    assert response.status_code == 429 and response.json()["error"]["code"] == "queue_timeout"
    scrape = Scrape(live.url)
    assert scrape.get("gptoss_requests_timed_out_total", priority="low") == 1
    assert scrape.get("gptoss_requests_accepted_then_failed_total", priority="low", reason="timeout") == 1
    assert scrape.get("gptoss_requests_admitted_total", priority="low") == 0
    assert scrape.get("gptoss_queue_wait_seconds_count", priority="low") == 0  # never admitted: no wait observed
    assert joined(blocker).status_code == 200
    assert Scrape(live.url).get("gptoss_requests_timed_out_total", priority="medium") == 0


def test_disconnects_are_counted_by_stage(make_server):
    live = make_server(*SLOW)
    running = in_thread(chat, live.url, max_tokens=2000, timeout=1.5)
    live.wait_for(lambda s: s["running"] == 1)
    with pytest.raises(httpx.ReadTimeout):  # gives up while still queued behind the running one
        chat(live.url, headers={"X-Priority": "low"}, timeout=0.3)
    live.wait_for(lambda s: s["waiting_total"] == 0)
    with pytest.raises(httpx.ReadTimeout):
        joined(running)
    live.wait_for(lambda s: s["running"] == 0)
    payload = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2000, "stream": True}
    with httpx.stream(
        "POST", live.url + "/v1/chat/completions", json=payload, headers={"X-Priority": "high"}, timeout=30
    ) as response:
        data = (line for line in response.iter_lines() if line.startswith("data:"))
        next(data), next(data)  # the role chunk, then the first token: leave mid-generation
    scrape = poll_metrics(live.url, lambda m: m.get("gptoss_requests_running") == 0)
    assert scrape.get("gptoss_requests_disconnected_total", priority="low", stage="queued") == 1
    assert scrape.get("gptoss_requests_disconnected_total", priority="medium", stage="running") == 1
    assert scrape.get("gptoss_requests_disconnected_total", priority="high", stage="running") == 1
    assert scrape.get("gptoss_requests_disconnected_total", priority="medium", stage="queued") == 0
    # a request that did not finish has no duration; a dropped waiter was never admitted
    assert scrape.get("gptoss_request_duration_seconds_count", priority="medium") == 0
    assert scrape.get("gptoss_requests_admitted_total", priority="low") == 0
    assert scrape.get("gptoss_time_to_first_token_seconds_count", priority="high") == 1


def test_live_gauges_while_requests_wait(make_server):
    live = make_server(*SLOW, "scheduler.limit.take_back=false")  # the high waits: no slot taken back
    blocker = in_thread(chat, live.url, max_tokens=100)
    live.wait_for(lambda s: s["running"] == 1)
    waiters = [in_thread(chat, live.url, headers={"X-Priority": cls}) for cls in ("low", "high", "low")]
    scrape = poll_metrics(
        live.url,
        lambda m: (
            m.get("gptoss_requests_waiting", priority="low") == 2
            and m.get("gptoss_requests_waiting", priority="high") == 1
        ),
    )
    assert scrape.get("gptoss_requests_waiting", priority="medium") == 0
    assert scrape.get("gptoss_requests_running") == 1
    assert scrape.get("gptoss_token_budget_in_use") > 0
    assert 0 < scrape.get("gptoss_engine_kv_cache_usage_ratio") < 1
    assert scrape.get("gptoss_emergency_mode") == 0
    for box in (blocker, *waiters):
        assert joined(box).status_code == 200
    scrape = Scrape(live.url)
    assert [scrape.get("gptoss_requests_waiting", priority=c) for c in CLASSES] == [0, 0, 0]
    assert scrape.get("gptoss_requests_running") == 0 and scrape.get("gptoss_token_budget_in_use") == 0
    assert scrape.get("gptoss_generated_tokens_total") == 100 + 3 * 5
    assert scrape.get("gptoss_queue_wait_seconds_sum", priority="low") > 2 * 0.3  # both waited for the blocker


def test_cache_hits_and_misses(make_server, tmp_path):
    live = make_server("cache.enabled=true", f"cache.path={tmp_path / 'cache.sqlite3'}")
    assert Scrape(live.url).get("gptoss_cache_hits_total") == 0
    first = chat(live.url, max_tokens=6, temperature=0)
    second = chat(live.url, max_tokens=6, temperature=0)
    assert [first.headers["x-cache"], second.headers["x-cache"]] == ["MISS", "HIT"]
    assert first.json()["choices"][0]["message"] == second.json()["choices"][0]["message"]
    scrape = Scrape(live.url)
    assert scrape.get("gptoss_cache_hits_total") == 1 and scrape.get("gptoss_cache_misses_total") == 1
    assert scrape.get("gptoss_requests_admitted_total", priority="medium") == 1  # the hit never queued
    assert scrape.get("gptoss_generated_tokens_total") == 6


def test_cache_metrics_absent_without_a_cache(make_server):
    live = make_server()
    scrape = Scrape(live.url)
    assert "gptoss_cache_hits" not in scrape.families and "gptoss_gpu_memory_used_bytes" not in scrape.families


def test_names_follow_prometheus_conventions(make_server, tmp_path):
    live = make_server("cache.enabled=true", f"cache.path={tmp_path / 'cache.sqlite3'}")
    assert chat(live.url, max_tokens=2).status_code == 200
    scrape = Scrape(live.url)
    assert scrape.content_type.startswith("text/plain; version=0.0.4")
    expected = {
        "gptoss_requests_admitted": "counter",
        "gptoss_requests_rejected": "counter",
        "gptoss_requests_timed_out": "counter",
        "gptoss_requests_disconnected": "counter",
        "gptoss_requests_failed": "counter",
        "gptoss_generated_tokens": "counter",
        "gptoss_cache_hits": "counter",
        "gptoss_cache_misses": "counter",
        "gptoss_queue_wait_seconds": "histogram",
        "gptoss_time_to_first_token_seconds": "histogram",
        "gptoss_request_duration_seconds": "histogram",
        "gptoss_requests_waiting": "gauge",
        "gptoss_requests_running": "gauge",
        "gptoss_emergency_mode": "gauge",
        "gptoss_admission_paused": "gauge",
        "gptoss_token_budget_in_use": "gauge",
        "gptoss_engine_kv_cache_usage_ratio": "gauge",
    }
    types = {name: family.type for name, family in scrape.families.items()}
    assert {name: types.get(name) for name in expected} == expected
    for name, family in scrape.families.items():
        assert re.fullmatch(r"gptoss_[a-z0-9_]+", name), name
        assert family.documentation, f"{name} has no HELP"
        for sample in family.samples:
            if family.type == "counter":
                assert sample.name in (name + "_total", name + "_created"), sample.name
            else:
                assert not sample.name.endswith("_total"), sample.name
            if family.type == "histogram":
                assert name.endswith("_seconds"), name
    declared = dict(re.findall(r"^# TYPE (\S+) (\S+)$", scrape.text, re.M))
    assert all(name.startswith("gptoss_") for name in declared)
    assert "_ms" not in scrape.text and "_milliseconds" not in scrape.text
