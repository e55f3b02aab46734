"""Schemathesis, driven by the server's own /openapi.json, over every route of a live server on
the simulator: no 5xx, and every 4xx in its API's shape (OpenAI's, Anthropic's, Ollama's)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from tests.conftest import LiveServer, live_server


@pytest.fixture(scope="module")
def fuzzed_server() -> Iterator[LiveServer]:
    with live_server("engine.sim.token_latency_ms=0", "server.default_max_tokens=4") as live:
        yield live


def test_every_route_answers_without_5xx_and_in_the_openai_shape(fuzzed_server: LiveServer) -> None:
    schema = schemathesis.openapi.from_url(fuzzed_server.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {f"{op.method.upper()} {op.path}" for op in operations} >= {
        "POST /v1/chat/completions",
        "POST /v1/completions",
        "GET /v1/models",
        "GET /v1/queue/status",
        "DELETE /v1/cache",
        "POST /api/chat",
        "GET /api/tags",
    }
    for operation, mode in itertools.product(operations, GenerationMode):  # valid inputs, and invalid ones

        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(case=operation.as_strategy(generation_mode=mode))
        def check(case) -> None:  # noqa: ANN001 - schemathesis' Case
            response = case.call(timeout=30)
            where = (case.method, case.path, response.status_code, response.text[:300])
            assert response.status_code < 500 or response.status_code == 529, where  # 529: Anthropic's "overloaded"
            if response.status_code >= 400 and case.path.startswith("/v1/messages"):  # Anthropic's shape
                body = response.json()
                assert body["type"] == "error" and sorted(body["error"]) == ["message", "type"], where
            elif response.status_code >= 400 and case.path.startswith("/api/"):  # Ollama's shape
                body = response.json()
                assert list(body) == ["error"] and body["error"], where
            elif response.status_code >= 400 and case.path.startswith("/v1/"):
                error = response.json()["error"]
                assert sorted(error) == ["code", "message", "param", "type"] and error["message"], where

        try:
            check()
        except Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE, operation.path  # a route that takes nothing has no bad input
