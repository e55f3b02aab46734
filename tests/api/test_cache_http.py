"""The response cache through a real server: X-Cache, Cache-Control, namespaces, single flight,
concurrency, restarts, and the cache endpoints."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import LiveServer, live_server

CHAT = "/v1/chat/completions"


def cached(path: Path, *more: str) -> tuple[str, ...]:
    return ("cache.enabled=true", f"cache.path={path}", *more)


def body(prompt: str, max_tokens: int = 6, **extra) -> dict:
    return {
        "model": "sim",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        **extra,
    }


def generated(live: LiveServer) -> int:
    return live.services.engine.stats().generated_tokens


def content(response: httpx.Response) -> str:
    return response.json()["choices"][0]["message"]["content"]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One cached server for the tests below that use prompts of their own."""
    with live_server(*cached(tmp_path_factory.mktemp("cache") / "c.sqlite3")) as server:
        yield server


@pytest.fixture
def http(live: LiveServer) -> Iterator[httpx.Client]:
    with live.http() as client:
        yield client


def test_miss_then_hit_with_the_same_answer_usage_and_a_fresh_id(live: LiveServer, http: httpx.Client):
    before = generated(live)
    first = http.post(CHAT, json=body("miss then hit", 7))
    after_first = generated(live)
    second = http.post(CHAT, json=body("miss then hit", 7))
    third = http.post(CHAT, json=body("miss then hit", 7, request_id="mine-3"))
    assert (first.status_code, second.status_code, third.status_code) == (200, 200, 200)
    assert [r.headers["x-cache"] for r in (first, second, third)] == ["MISS", "HIT", "HIT"]
    assert after_first - before == 7 and generated(live) == after_first  # hits generate nothing
    a, b, c = first.json(), second.json(), third.json()
    assert a["choices"] == b["choices"] == c["choices"]
    assert a["choices"][0]["finish_reason"] == "length" and a["usage"]["completion_tokens"] == 7
    for hit in (b, c):
        assert hit["usage"]["prompt_tokens"] == a["usage"]["prompt_tokens"]
        assert hit["usage"]["completion_tokens"] == a["usage"]["completion_tokens"]
        assert hit["usage"]["total_tokens"] == a["usage"]["total_tokens"]
        assert hit["object"] == "chat.completion" and hit["model"] == a["model"]
    assert len({a["id"], b["id"], c["id"]}) == 3 and c["id"] == "mine-3"
    assert second.headers["x-request-id"] == b["id"]


def test_streaming_answers_are_stored_and_replayed_to_the_openai_client(live: LiveServer):
    client = live.client()
    request = dict(
        model="sim", messages=[{"role": "user", "content": "stream me"}], max_tokens=9, temperature=0, seed=3
    )
    before = generated(live)
    headers, texts, usages, ids = [], [], [], []
    for _ in range(2):
        raw = client.chat.completions.with_raw_response.create(
            stream=True, stream_options={"include_usage": True}, **request
        )
        headers.append(raw.headers["x-cache"])
        with raw.parse() as stream:
            chunks = list(stream)
        texts.append("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
        assert chunks[0].choices[0].delta.role == "assistant"
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
        assert chunks[-1].choices == []
        usages.append(chunks[-1].usage)
        assert len({c.id for c in chunks}) == 1
        ids.append(chunks[0].id)
    whole = client.chat.completions.with_raw_response.create(**request)
    assert headers == ["MISS", "HIT"] and whole.headers["x-cache"] == "HIT"
    completion = whole.parse()
    assert texts[0] == texts[1] == completion.choices[0].message.content
    assert usages[0].completion_tokens == usages[1].completion_tokens == completion.usage.completion_tokens == 9
    assert usages[0].prompt_tokens == usages[1].prompt_tokens == completion.usage.prompt_tokens
    assert len({*ids, completion.id}) == 3
    assert generated(live) - before == 9


def test_sampled_requests_bypass_the_cache(live: LiveServer, http: httpx.Client):
    entries = http.get("/v1/cache/stats").json()["entries"]
    before = generated(live)
    sampled = {
        "model": "sim",
        "messages": [{"role": "user", "content": "sampled"}],
        "max_tokens": 5,
        "temperature": 0.7,
    }
    default_temperature = {"model": "sim", "messages": [{"role": "user", "content": "sampled"}], "max_tokens": 5}
    responses = [http.post(CHAT, json=b) for b in (sampled, sampled, default_temperature)]
    assert [r.headers["x-cache"] for r in responses] == ["BYPASS"] * 3
    assert generated(live) - before == 15
    assert http.get("/v1/cache/stats").json()["entries"] == entries


def test_a_seed_makes_a_sampled_request_cacheable(live: LiveServer, http: httpx.Client):
    seeded = {
        "model": "sim",
        "messages": [{"role": "user", "content": "seeded"}],
        "max_tokens": 5,
        "temperature": 0.7,
        "seed": 11,
    }
    first, second = http.post(CHAT, json=seeded), http.post(CHAT, json=seeded)
    assert (first.headers["x-cache"], second.headers["x-cache"]) == ("MISS", "HIT")
    assert content(first) == content(second)
    other_seed = http.post(CHAT, json={**seeded, "seed": 12})
    assert other_seed.headers["x-cache"] == "MISS"


def test_no_cache_skips_the_lookup_but_refreshes_the_entry(live: LiveServer, http: httpx.Client):
    request = body("no-cache prompt")
    before = generated(live)
    fresh = http.post(CHAT, json=request, headers={"Cache-Control": "no-cache"})
    assert fresh.headers["x-cache"] == "MISS" and generated(live) - before == 6
    hit = http.post(CHAT, json=request)
    assert hit.headers["x-cache"] == "HIT" and generated(live) - before == 6
    again = http.post(CHAT, json=request, headers={"Cache-Control": "max-age=0, No-Cache"})
    assert again.headers["x-cache"] == "MISS" and generated(live) - before == 12  # generated despite the entry
    assert http.post(CHAT, json=request).headers["x-cache"] == "HIT"
    assert content(fresh) == content(hit) == content(again)


def test_no_store_neither_reads_nor_writes(live: LiveServer, http: httpx.Client):
    stored, unseen = body("no-store stored"), body("no-store unseen")
    assert http.post(CHAT, json=stored).headers["x-cache"] == "MISS"
    before = generated(live)
    skipped = http.post(CHAT, json=stored, headers={"Cache-Control": "no-store"})
    assert skipped.headers["x-cache"] == "BYPASS" and generated(live) - before == 6
    unwritten = http.post(CHAT, json=unseen, headers={"cache-control": "no-store"})
    assert unwritten.headers["x-cache"] == "BYPASS" and generated(live) - before == 12
    assert http.post(CHAT, json=unseen).headers["x-cache"] == "MISS"


def test_cache_false_in_the_body_bypasses(live: LiveServer, http: httpx.Client):
    stored, unseen = body("body opt-out stored"), body("body opt-out unseen")
    assert http.post(CHAT, json=stored).headers["x-cache"] == "MISS"
    before = generated(live)
    assert http.post(CHAT, json={**stored, "cache": False}).headers["x-cache"] == "BYPASS"
    assert http.post(CHAT, json={**unseen, "cache": False}).headers["x-cache"] == "BYPASS"
    assert generated(live) - before == 12
    assert http.post(CHAT, json=unseen).headers["x-cache"] == "MISS"
    assert http.post(CHAT, json={**unseen, "cache": True}).headers["x-cache"] == "HIT"


def test_namespaces_keep_each_keys_answers_apart(make_server, tmp_path: Path):
    live = make_server(*cached(tmp_path / "c.sqlite3", "cache.namespace_by_key=true", "server.api_keys=[ka,kb]"))
    request = body("namespaced")
    with live.http(headers={"Authorization": "Bearer ka"}) as a, live.http(headers={"Authorization": "Bearer kb"}) as b:
        assert a.post(CHAT, json=request).headers["x-cache"] == "MISS"
        assert a.post(CHAT, json=request).headers["x-cache"] == "HIT"
        before = generated(live)
        first_b = b.post(CHAT, json=request)
        assert first_b.headers["x-cache"] == "MISS" and generated(live) - before == 6
        assert b.post(CHAT, json=request).headers["x-cache"] == "HIT"
        assert b.get("/v1/cache/stats").json()["entries"] == 2


async def test_single_flight_identical_requests_share_one_generation(make_server, tmp_path: Path):
    live = make_server(*cached(tmp_path / "c.sqlite3", "engine.sim.token_latency_ms=20"))
    request = body("single flight", 10)
    before = generated(live)
    async with httpx.AsyncClient(base_url=live.url, timeout=30) as client:
        responses = await asyncio.gather(*(client.post(CHAT, json=request) for _ in range(10)))
    assert [r.status_code for r in responses] == [200] * 10
    assert generated(live) - before == 10  # exactly one generation of max_tokens
    assert Counter(r.headers["x-cache"] for r in responses) == {"MISS": 1, "HIT": 9}
    answers = [r.json() for r in responses]
    assert all(a["choices"] == answers[0]["choices"] and a["usage"] == answers[0]["usage"] for a in answers)
    assert len({a["id"] for a in answers}) == 10
    stats = httpx.get(live.url + "/v1/cache/stats").json()
    assert (stats["hits"], stats["misses"], stats["entries"]) == (9, 1, 1)  # followers count as hits
    assert len(live.services.pipeline.cache.flight) == 0


async def test_200_concurrent_requests_get_their_own_answers(
    make_server, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(logging.getLogger("gpt_oss_webui"), "propagate", True)
    caplog.set_level(logging.WARNING)
    live = make_server(*cached(tmp_path / "c.sqlite3", "scheduler.max_queue_size=512"))
    prompts = ["the same prompt"] * 100 + [f"prompt number {n}" for n in range(100)]
    # no keep-alive: a connection idle past uvicorn's 5 s keep-alive can be closed just as it is reused
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=live.url, timeout=60, limits=limits) as client:
        distinct = sorted(set(prompts))
        uncached = await asyncio.gather(*(client.post(CHAT, json=body(p, 5, cache=False)) for p in distinct))
        assert {r.headers["x-cache"] for r in uncached} == {"BYPASS"}
        expected = {p: content(r) for p, r in zip(distinct, uncached)}
        before = generated(live)
        responses = await asyncio.gather(*(client.post(CHAT, json=body(p, 5)) for p in prompts))
    assert [r.status_code for r in responses] == [200] * 200
    for prompt, response in zip(prompts, responses):
        assert content(response) == expected[prompt], prompt
    assert len({r.json()["id"] for r in responses}) == 200
    assert generated(live) - before == 101 * 5  # one generation per distinct prompt
    verdicts = Counter(r.headers["x-cache"] for r in responses)
    assert verdicts["MISS"] == 101 and verdicts["HIT"] == 99
    stats = httpx.get(live.url + "/v1/cache/stats").json()
    assert stats["hits"] + stats["misses"] == 200
    assert (stats["hits"], stats["misses"], stats["entries"]) == (verdicts["HIT"], verdicts["MISS"], 101)
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "locked" in m or "cache write failed" in m or "cache read failed" in m]


def test_entries_survive_a_restart_of_the_service(tmp_path: Path):
    settings = cached(tmp_path / "c.sqlite3")
    with live_server(*settings) as first, first.http() as http:
        miss = http.post(CHAT, json=body("survives a restart", 8))
        assert miss.headers["x-cache"] == "MISS"
    with live_server(*settings) as second, second.http() as http:
        hit = http.post(CHAT, json=body("survives a restart", 8))
        assert hit.headers["x-cache"] == "HIT" and generated(second) == 0
        assert hit.json()["choices"] == miss.json()["choices"] and hit.json()["usage"] == miss.json()["usage"]
        assert http.get("/v1/cache/stats").json()["entries"] == 1


def test_a_hit_is_served_while_the_engine_is_still_loading(tmp_path: Path):
    settings = cached(tmp_path / "c.sqlite3")
    with live_server(*settings) as first, first.http() as http:
        stored = http.post(CHAT, json=body("ready before loading"))
    with live_server(*settings, "engine.sim.startup_s=3", wait_ready=False) as loading, loading.http() as http:
        assert http.get("/healthz").status_code == 503
        hit = http.post(CHAT, json=body("ready before loading"))
        assert hit.status_code == 200 and hit.headers["x-cache"] == "HIT"
        assert hit.json()["choices"] == stored.json()["choices"]
        miss = http.post(CHAT, json=body("not stored yet"))
        assert miss.status_code == 503 and miss.json()["error"]["code"] == "engine_loading"
        assert http.get("/healthz").status_code == 503 and not loading.services.engine.ready
        assert len(loading.services.pipeline.cache.flight) == 0  # the failed leader released its flight


def test_cache_stats_fields(make_server, tmp_path: Path):
    live = make_server(*cached(tmp_path / "c.sqlite3", "cache.ttl_s=600", "cache.max_entries=50"))
    with live.http() as http:
        http.post(CHAT, json=body("stats"))
        http.post(CHAT, json=body("stats"))
        stats = http.get("/v1/cache/stats").json()
    assert set(stats) == {
        "object",
        "enabled",
        "entries",
        "bytes",
        "hits",
        "misses",
        "hit_rate",
        "evictions",
        "expired",
        "max_entries",
        "max_bytes",
        "ttl_s",
    }
    assert stats["object"] == "cache.stats" and stats["enabled"] is True
    assert (stats["entries"], stats["hits"], stats["misses"], stats["hit_rate"]) == (1, 1, 1, 0.5)
    assert stats["bytes"] > 0 and (stats["evictions"], stats["expired"]) == (0, 0)
    assert (stats["max_entries"], stats["ttl_s"]) == (50, 600)


def test_cache_stats_when_the_cache_is_off(make_server):
    live = make_server()  # the fast test settings turn the cache off
    with live.http() as http:
        assert http.get("/v1/cache/stats").json() == {"object": "cache.stats", "enabled": False}
        assert http.post(CHAT, json=body("off")).headers["x-cache"] == "BYPASS"
        assert http.delete("/v1/cache").json() == {"object": "cache.cleared", "removed": 0}


def test_delete_clears_the_cache(make_server, tmp_path: Path):
    live = make_server(*cached(tmp_path / "c.sqlite3"))
    with live.http() as http:
        for prompt in ("one", "two"):
            http.post(CHAT, json=body(prompt))
        assert http.post(CHAT, json=body("one")).headers["x-cache"] == "HIT"
        cleared = http.delete("/v1/cache")
        assert cleared.status_code == 200 and cleared.json() == {"object": "cache.cleared", "removed": 2}
        assert http.get("/v1/cache/stats").json()["entries"] == 0
        assert http.post(CHAT, json=body("one")).headers["x-cache"] == "MISS"


def test_a_known_key_that_is_not_an_admin_gets_403(make_server, tmp_path: Path):
    live = make_server(*cached(tmp_path / "c.sqlite3", "server.api_keys=[user]", "server.admin_keys=[adm]"))
    with live.http() as http:
        denied = http.delete("/v1/cache", headers={"Authorization": "Bearer user"})
        assert denied.status_code == 403 and denied.json()["error"]["type"] == "permission_error"
        assert http.delete("/v1/cache").status_code == 401  # no key at all: authenticate first


def test_delete_needs_an_admin_key_when_admin_keys_are_set(make_server, tmp_path: Path):
    live = make_server(*cached(tmp_path / "c.sqlite3", "server.admin_keys=[adm]"))
    with live.http() as http:
        http.post(CHAT, json=body("guarded"))
        anonymous = http.delete("/v1/cache")
        assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "admin_key_required"
        wrong = http.delete("/v1/cache", headers={"Authorization": "Bearer not-admin"})
        assert wrong.status_code == 401
        assert http.get("/v1/cache/stats").json()["entries"] == 1
        admin = http.delete("/v1/cache", headers={"Authorization": "Bearer adm"})
        assert admin.status_code == 200 and admin.json()["removed"] == 1
        assert http.get("/v1/cache/stats").json()["entries"] == 0
