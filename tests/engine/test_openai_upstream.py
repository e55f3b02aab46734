"""The `openai` engine backend: a gateway (a real server of ours) in front of upstream servers,
over loopback. The upstreams are tiny fakes that report vLLM's metrics and record what they get,
and, for two tests, another server of ours on the simulator."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

from tests.conftest import LiveServer, live_server
from tests.engine.fake_upstream import FakeUpstream, running

FAST_WATCH = ["engine.backend=openai", "engine.openai.metrics_interval_s=0.1", "engine.openai.health_interval_s=0.2"]


def gateway(*upstreams: FakeUpstream, extra: tuple[str, ...] = ()):
    urls = ",".join(u.url for u in upstreams)
    return live_server(*FAST_WATCH, f"engine.openai.upstreams=[{urls}]", *extra)


def ask(live: LiveServer, text: str = "hello", **headers: str) -> httpx.Response:
    return httpx.post(
        live.url + "/v1/chat/completions",
        timeout=30,
        headers=headers,
        json={"model": "fake-model", "messages": [{"role": "user", "content": text}], "max_tokens": 5},
    )


def eventually(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.02)


def test_requests_go_to_the_least_loaded_upstream_and_carry_their_class() -> None:
    with running(FakeUpstream("a", running=20), FakeUpstream("b")) as (a, b), gateway(a, b) as live:
        assert httpx.get(live.url + "/v1/models", timeout=10).json()["data"][0]["id"] == "fake-model"
        upstreams = live.services.engine.pool.upstreams
        eventually(lambda: upstreams[0].running == 20)  # a metrics reading
        answers = [ask(live, f"question {i}", **{"X-Priority": cls}) for i, cls in enumerate(("high", "low", "medium"))]
        assert all(r.status_code == 200 for r in answers) and not a.bodies and len(b.bodies) == 3
        assert answers[0].json()["choices"][0]["message"]["content"].startswith("b0 b1")
        assert [body["priority"] for body in b.bodies] == [0, 2, 1]  # vLLM's order: lower runs first
        assert b.bodies[0]["stream"] and b.bodies[0]["max_tokens"] == 5
        b.running = 60
        eventually(lambda: upstreams[1].running == 60)
        assert ask(live, "another").status_code == 200 and len(a.bodies) == 1
        usage = ask(live, "counted").json()["usage"]
        assert usage["completion_tokens"] == 5


def test_a_failure_before_the_first_token_is_retried_elsewhere_and_the_upstream_ejected() -> None:
    a, b = FakeUpstream("a", status=503, models_status=503), FakeUpstream("b", running=10)
    with running(a, b), gateway(a, b) as live:
        eventually(lambda: live.services.engine.pool.upstreams[1].running == 10)
        for i in range(3):
            answer = ask(live, f"question {i}")
            assert answer.status_code == 200 and "b0" in answer.json()["choices"][0]["message"]["content"]
        engine = live.services.engine
        eventually(lambda: not engine.pool.upstreams[0].healthy)
        a.status = a.models_status = 200
        eventually(lambda: engine.pool.upstreams[0].healthy)  # the health check brings it back
        b.running = 60
        eventually(lambda: engine.pool.upstreams[1].running == 60)
        assert "a0" in ask(live, "now a").json()["choices"][0]["message"]["content"]


def test_no_upstream_left_is_a_clean_error() -> None:
    with running(FakeUpstream("a", status=503)) as (a,), gateway(a, extra=("engine.openai.retries=0",)) as live:
        answer = ask(live)
        assert answer.status_code == 500 and answer.json()["error"]["code"] == "engine_error"


def test_a_client_that_leaves_closes_the_upstream_stream() -> None:
    with running(FakeUpstream("a", tokens=200, token_delay_s=0.05)) as (a,), gateway(a) as live:
        body = {
            "model": "fake-model",
            "messages": [{"role": "user", "content": "long"}],
            "max_tokens": 200,
            "stream": True,
            "request_id": "leaver",
        }
        with httpx.stream("POST", live.url + "/v1/chat/completions", json=body, timeout=30) as response:
            for line in response.iter_lines():
                if "a1 " in line:
                    break
        eventually(lambda: a.disconnected == ["leaver"])
        eventually(lambda: live.services.scheduler.admission.running == 0)


def test_a_gateway_in_front_of_our_own_server_on_the_simulator() -> None:
    with live_server() as upstream:
        extra = (f"engine.openai.upstreams=[{upstream.base_url}]", "engine.openai.send_priority=false")
        with live_server(*FAST_WATCH, *extra) as live:
            client = live.client()
            assert client.models.list().data[0].id == "sim"
            whole = client.chat.completions.create(
                model="sim", messages=[{"role": "user", "content": "hi"}], max_tokens=12, seed=1
            )
            assert whole.usage.completion_tokens == 12 and len(whole.choices[0].message.content.split()) == 12
            streamed = client.chat.completions.create(
                model="sim", messages=[{"role": "user", "content": "hi"}], max_tokens=12, seed=1, stream=True
            )
            assert (
                "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
                == whole.choices[0].message.content
            )
            long = [{"role": "system", "content": "be brief " * 40}, {"role": "user", "content": "hi there"}]
            direct = upstream.client().chat.completions.create(model="sim", messages=long, max_tokens=2)
            through = client.chat.completions.create(model="sim", messages=long, max_tokens=2)
            assert through.usage.prompt_tokens == direct.usage.prompt_tokens  # the upstream's count, by /tokenize
            text = client.completions.create(model="sim", prompt="be brief " * 40, max_tokens=5, seed=1, echo=True)
            own = upstream.client().completions.create(model="sim", prompt="be brief " * 40, max_tokens=5, seed=1)
            assert text.choices[0].text == "be brief " * 40 + own.choices[0].text and text.usage == own.usage


def test_an_upstream_whose_token_counts_are_spent_is_not_asked_again_until_they_renew() -> None:
    """Our own server upstream, its key's `rpm` of 3 counting /tokenize in a window of its own."""
    with live_server("server.keys=[{name: gw, key: sk-gw-000001, rpm: 3}]") as upstream:
        upstreams = f"engine.openai.upstreams=[{{url: {upstream.base_url}, api_key: sk-gw-000001}}]"
        with live_server(*FAST_WATCH, upstreams, "engine.openai.send_priority=false") as live:
            chat = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
            spend = {"messages": chat["messages"]}
            for _ in range(2):  # the key's counts spent by its own calls
                auth = {"Authorization": "Bearer sk-gw-000001"}
                assert httpx.post(upstream.url + "/tokenize", json=spend, headers=auth).status_code == 200
            assert live.client().chat.completions.create(**chat).usage.prompt_tokens > 0  # counted: the third
            pool = live.services.engine.pool.upstreams[0]
            assert pool.tokenize_after == 0.0
            assert live.client().chat.completions.create(**chat).usage.prompt_tokens > 0  # refused: estimated
            assert pool.tokenizes and pool.tokenize_after > time.monotonic() + 30  # not asked for a while


def test_prompt_tokens_are_estimated_where_no_upstream_tokenizes() -> None:
    with running(FakeUpstream("a")) as ups, gateway(*ups) as live:
        text = "x" * 400  # a quarter of the characters plus 4 for the message
        assert ask(live, text).json()["usage"]["prompt_tokens"] == 104
        assert ask(live, text).status_code == 200 and not live.services.engine.pool.upstreams[0].tokenizes


@pytest.mark.parametrize(
    "value, urls",
    [
        ("[http://a:8000/v1,http://b:8000/v1]", ["http://a:8000/v1", "http://b:8000/v1"]),
        ("[{url: http://a:8000/v1, api_key: k, weight: 2}]", ["http://a:8000/v1"]),
    ],
)
def test_upstreams_from_the_command_line(value: str, urls: list[str]) -> None:
    from settings import load_config

    config = load_config(None, overrides=[f"engine.openai.upstreams={value}"])
    assert [u.url for u in config.engine.openai.upstreams] == urls


def test_an_upstreams_own_refusal_reaches_the_client_as_a_400() -> None:
    with running(FakeUpstream("a", status=400)) as (a,), gateway(a) as live:
        answer = ask(live)
        error = answer.json()["error"]
        assert answer.status_code == 400 and error["code"] == "upstream_rejected"
        assert "upstream trouble" in error["message"]
        assert live.services.engine.pool.upstreams[0].healthy  # the client's fault, not the upstream's
