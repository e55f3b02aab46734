"""Similar-question answers through a real server: X-Cache: SIMILAR and its headers (JSON and
streaming), what never crosses (guards, namespaces, system prompt, tools, sampling), opting out,
feedback that blocks a pairing for good, the stats and metrics, and restarts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from settings.loader import ConfigError, load_config
from tests.conftest import LiveServer, live_server

CHAT = "/v1/chat/completions"
QUESTION = "How do I sort a list of numbers by their absolute value in Python?"
PARAPHRASE = "in python,   how do i sort a list of numbers by their absolute valeu"  # clause moved, typo, case, spaces
A_KEY, B_KEY = "Bearer team-a-key", "Bearer team-b-key"


def settings(path: Path, *more: str) -> tuple[str, ...]:
    return (
        "cache.enabled=true",
        f"cache.path={path}",
        "cache.similar.enabled=true",
        "cache.namespace_by_key=true",
        "server.api_keys=[team-a-key,team-b-key]",
        "server.admin_keys=[ops-key-01]",
        *more,
    )


def body(prompt: str, system: str | None = None, **extra) -> dict:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    return {"model": "sim", "messages": messages, "max_tokens": 6, "temperature": 0, **extra}


def generated(live: LiveServer) -> int:
    return live.services.engine.stats().generated_tokens


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with live_server(*settings(tmp_path_factory.mktemp("similar") / "c.sqlite3")) as server:
        yield server


@pytest.fixture
def http(live: LiveServer) -> Iterator[httpx.Client]:
    with live.http(headers={"Authorization": A_KEY}) as client:
        yield client


def test_a_paraphrase_is_answered_from_the_cache_and_says_so(live: LiveServer, http: httpx.Client):
    first = http.post(CHAT, json=body(QUESTION, "paraphrase"))
    before = generated(live)
    similar = http.post(CHAT, json=body(PARAPHRASE, "paraphrase"))
    assert (first.headers["x-cache"], similar.headers["x-cache"]) == ("MISS", "SIMILAR")
    assert generated(live) == before  # nothing generated
    assert 0.5 <= float(similar.headers["x-cache-similarity"]) < 1.0
    assert len(similar.headers["x-cache-source"]) == 64
    assert similar.json()["choices"] == first.json()["choices"]
    with http.stream("POST", CHAT, json=body(PARAPHRASE, "paraphrase", stream=True)) as streamed:
        assert streamed.headers["x-cache"] == "SIMILAR"
        assert streamed.headers["x-cache-source"] == similar.headers["x-cache-source"]
        assert "[DONE]" in streamed.read().decode()
    assert http.post(CHAT, json=body(QUESTION, "paraphrase")).headers["x-cache"] == "HIT"  # exact beats similar


@pytest.mark.parametrize(
    "stored, asked, guard",
    [
        ("Turn on dark mode in the settings page", "Turn off dark mode in the settings page", "polarity"),
        ("Convert 5 km to miles for my running log", "Convert 8 km to miles for my running log", "numbers"),
        (
            "Why is my build failing with --strict enabled on the main branch of the repo",
            "Why is my build failing with --fast enabled on the main branch of the repo",
            "code",
        ),
        (
            "Explain what the get_user function does in the accounts module of our web service",
            "Explain what the get_users function does in the accounts module of our web service",
            "code",
        ),
        (
            "In the story about the old farm and the red barn, does the dog chase the cat",
            "In the story about the old farm and the red barn, does the cat chase the dog",
            "order",
        ),
        ("Why does the server return errors", "Why does the server never return errors", "negations"),
        ("为什么服务器每天晚上都会返回错误信息", "为什么服务器每天晚上都不会返回错误信息", "negations"),
    ],
)
def test_a_guard_refuses_its_hard_negative(http: httpx.Client, stored: str, asked: str, guard: str):
    """Each pair is above the threshold, so only the guard keeps it from being a hit."""
    assert http.post(CHAT, json=body(stored, "guards")).headers["x-cache"] == "MISS"
    before = http.get("/v1/cache/stats").json()["similar"]["refused_by_guard"].get(guard, 0)
    assert http.post(CHAT, json=body(asked, "guards")).headers["x-cache"] == "MISS"
    assert http.get("/v1/cache/stats").json()["similar"]["refused_by_guard"][guard] == before + 1


def test_only_the_user_text_may_differ(http: httpx.Client, live: LiveServer):
    assert http.post(CHAT, json=body(QUESTION, "isolation")).headers["x-cache"] == "MISS"
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}
    for other in (
        body(PARAPHRASE, "another system prompt"),
        body(PARAPHRASE, "isolation", temperature=0, top_p=0.5),
        body(PARAPHRASE, "isolation", max_tokens=7),
        body(PARAPHRASE, "isolation", seed=3),
        body(PARAPHRASE, "isolation", tools=[tool]),
    ):
        assert http.post(CHAT, json=other).headers["x-cache"] == "MISS", other
    with live.http(headers={"Authorization": B_KEY}) as other_team:  # another cache namespace
        assert other_team.post(CHAT, json=body(PARAPHRASE, "isolation")).headers["x-cache"] == "MISS"
    assert http.post(CHAT, json=body(PARAPHRASE, "isolation")).headers["x-cache"] == "SIMILAR"


def test_a_request_may_opt_out(http: httpx.Client):
    http.post(CHAT, json=body(QUESTION, "opt out"))
    exact = http.post(CHAT, json=body(PARAPHRASE, "opt out", cache="exact"))
    assert exact.headers["x-cache"] == "MISS" and "x-cache-source" not in exact.headers
    fresh = http.post(CHAT, json=body(PARAPHRASE + "?", "opt out"), headers={"Cache-Control": "no-cache"})
    assert fresh.headers["x-cache"] == "MISS"
    bad = http.post(CHAT, json=body(PARAPHRASE, "opt out", cache="fuzzy"))
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "cache"


def test_feedback_by_response_id_blocks_the_pairing_and_counts(http: httpx.Client):
    http.post(CHAT, json=body(QUESTION, "feedback id"))
    hit = http.post(CHAT, json=body(PARAPHRASE, "feedback id"))
    assert hit.headers["x-cache"] == "SIMILAR"
    stats = http.get("/v1/cache/stats").json()["similar"]
    reported = http.post("/v1/cache/feedback", json={"request": hit.json()["id"]})
    assert reported.status_code == 200 and reported.json()["cache_source"] == hit.headers["x-cache-source"]
    assert http.post(CHAT, json=body(PARAPHRASE, "feedback id")).headers["x-cache"] == "MISS"
    after = http.get("/v1/cache/stats").json()["similar"]
    assert after["false_hit_reports"] == stats["false_hit_reports"] + 1
    metrics = http.get("/metrics", headers={"Authorization": "Bearer ops-key-01"}).text
    assert "gptoss_cache_similar_hits_total" in metrics and "gptoss_cache_similar_false_hits_total" in metrics


def test_feedback_by_response_id_reaches_only_the_callers_own_hit(live: LiveServer, http: httpx.Client):
    """A client picks its own response ids: another key naming the same id reports nothing of A's,
    and A's report of its id is still A's, whoever sent that id since."""
    http.post(CHAT, json=body(QUESTION, "feedback owner"))
    hit = http.post(CHAT, json=body(PARAPHRASE, "feedback owner", request_id="shared-id-1"))
    assert hit.headers["x-cache"] == "SIMILAR"
    with live.http(headers={"Authorization": B_KEY}) as other:
        assert other.post("/v1/cache/feedback", json={"request": "shared-id-1"}).status_code == 404
        other.post(CHAT, json=body(QUESTION, "feedback owner, b"))
        mine = other.post(CHAT, json=body(PARAPHRASE, "feedback owner, b", request_id="shared-id-1"))
        assert mine.headers["x-cache"] == "SIMILAR"
    reported = http.post("/v1/cache/feedback", json={"request": "shared-id-1"})
    assert reported.status_code == 200 and reported.json()["cache_source"] == hit.headers["x-cache-source"]


def test_feedback_with_the_request_body_and_its_errors(http: httpx.Client):
    http.post(CHAT, json=body(QUESTION, "feedback body"))
    asked = body(PARAPHRASE, "feedback body")
    hit = http.post(CHAT, json=asked)
    source = hit.headers["x-cache-source"]
    ok = http.post("/v1/cache/feedback", json={"request": asked, "cache_source": source})
    assert ok.status_code == 200 and ok.json()["new"] is True
    assert http.post(CHAT, json=asked).headers["x-cache"] == "MISS"
    unknown = http.post("/v1/cache/feedback", json={"request": "chatcmpl-never-served"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    for bad in ({"request": 3}, {"request": asked}, {"request": asked, "cache_source": "xyz"}, {"oops": 1}):
        answer = http.post("/v1/cache/feedback", json=bad)
        assert answer.status_code == 400 and answer.json()["error"]["message"], bad
    broken = http.post("/v1/cache/feedback", json={"request": {"model": "sim"}, "cache_source": source})
    assert broken.status_code == 400 and broken.json()["error"]["param"] == "messages"


def test_the_index_and_the_blocks_survive_a_restart(tmp_path: Path):
    config = settings(tmp_path / "c.sqlite3")
    with live_server(*config) as first, first.http(headers={"Authorization": A_KEY}) as http:
        http.post(CHAT, json=body(QUESTION, "restart"))
        http.post(CHAT, json=body("What is the boiling point of water at sea level", "restart"))
        blocked = http.post(CHAT, json=body("at sea level, what is the boiling point of water", "restart"))
        assert http.post("/v1/cache/feedback", json={"request": blocked.json()["id"]}).status_code == 200
    with live_server(*config) as second, second.http(headers={"Authorization": A_KEY}) as http:
        hit = http.post(CHAT, json=body(PARAPHRASE, "restart"))
        assert hit.headers["x-cache"] == "SIMILAR" and generated(second) == 0
        again = http.post(CHAT, json=body("at sea level, what is the boiling point of water", "restart"))
        assert again.headers["x-cache"] == "MISS"
        assert http.get("/v1/cache/stats").json()["similar"]["blocked_pairings"] == 1


def test_the_index_stays_within_the_cache_bound(tmp_path: Path):
    with (
        live_server(*settings(tmp_path / "c.sqlite3", "cache.max_entries=3")) as live,
        live.http(headers={"Authorization": A_KEY}) as http,
    ):
        for topic in ("sorting", "hashing", "parsing", "caching", "logging"):
            http.post(CHAT, json=body(f"explain {topic} algorithms with an example", "bound"))
        similar = http.get("/v1/cache/stats").json()
        assert similar["entries"] == 3 and similar["similar"]["indexed"] == 3
        assert (
            http.post(CHAT, json=body("explain sorting algorithms with an example!", "bound")).headers["x-cache"]
            == "MISS"
        )
        assert (
            http.post(CHAT, json=body("explain logging algorithms with an example!", "bound")).headers["x-cache"]
            == "SIMILAR"
        )


def test_with_redis_as_the_backend_similar_is_refused_at_start_in_one_line():
    with pytest.raises(ConfigError) as refused:
        load_config(None, overrides=["cache.backend=redis", "cache.similar.enabled=true"])
    assert "cache.similar.enabled needs cache.backend sqlite" in str(refused.value)
