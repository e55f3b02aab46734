"""Property-based fuzzing of the chat body (Hypothesis) against a live server on the simulator:
whatever arrives, no 5xx, no hang, and every refusal is an OpenAI error object."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import LiveServer, live_server

FIELDS = [
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "stop",
    "seed",
    "stream",
    "stream_options",
    "user",
    "n",
    "reasoning_effort",
    "cache",
    "include_reasoning",
    "priority",
    "request_id",
]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant", "developer", "tool", ""])},
    optional={"content": st.text(max_size=40) | JSON, "name": JSON},
)
BODY = st.fixed_dictionaries(
    {"model": st.sampled_from(["sim", "sim", "other"]), "messages": st.lists(MESSAGE, max_size=3) | JSON},
    optional={name: JSON | st.integers(min_value=-3, max_value=40) for name in FIELDS[2:]},
)
ALLOWED = {200, 400, 404, 413, 429}


@pytest.fixture(scope="module")
def fuzzed() -> Iterator[LiveServer]:
    with live_server("engine.sim.token_latency_ms=0", "server.default_max_tokens=4") as live:
        yield live


def check(response: httpx.Response) -> None:
    assert response.status_code in ALLOWED, (response.status_code, response.text[:300])
    if response.status_code == 200:
        if response.headers["content-type"].startswith("text/event-stream"):
            assert response.text.rstrip().endswith(("data: [DONE]", "}")), response.text[-200:]
        else:
            assert response.json()["object"] == "chat.completion"
        return
    error = response.json()["error"]
    assert sorted(error) == ["code", "message", "param", "type"] and error["message"], error


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(body=BODY)
def test_any_body_gets_an_answer_or_an_openai_error(fuzzed: LiveServer, body: dict) -> None:
    raw = json.dumps(body, allow_nan=True)  # NaN and Infinity literals too: Python's parser reads them
    check(
        httpx.post(
            fuzzed.url + "/v1/chat/completions", content=raw, timeout=30, headers={"Content-Type": "application/json"}
        )
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200) | JSON.map(lambda v: json.dumps(v, allow_nan=True).encode()))
def test_any_bytes_get_an_openai_error(fuzzed: LiveServer, raw: bytes) -> None:
    response = httpx.post(
        fuzzed.url + "/v1/chat/completions", content=raw, timeout=30, headers={"Content-Type": "application/json"}
    )
    check(response)
    assert response.status_code != 200


def test_the_server_is_idle_after_the_fuzzing(fuzzed: LiveServer) -> None:
    status = fuzzed.wait_for(lambda s: s["running"] == 0 and s["waiting_total"] == 0)
    assert status["tokens_in_use"] == 0
