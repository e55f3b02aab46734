"""Our answers checked against OpenAI's published response schemas (a cut of openai-openapi's spec in
fixtures/, made by scripts/openai-schemas.py), so clients generated from that spec can read them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from tests.conftest import LiveServer, live_server

SPEC = json.loads((Path(__file__).parent / "fixtures" / "openai-response-schemas.json").read_text())
MESSAGES = [{"role": "user", "content": "Hello there"}]


def check(document: dict, schema: str) -> None:
    validator = Draft202012Validator({"$ref": f"#/components/schemas/{schema}", "components": SPEC["components"]})
    errors = [f"{list(error.absolute_path)}: {error.message}" for error in validator.iter_errors(document)]
    assert not errors, errors


@pytest.fixture(scope="module", params=["plain", "harmony"])
def server(request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    extra = ["engine.sim.harmony=true", "engine.sim.natural_stop=true"] if request.param == "harmony" else []
    with live_server(*extra) as live:
        yield live


def test_a_chat_completion_is_a_create_chat_completion_response(server: LiveServer) -> None:
    with server.http() as http:
        body = http.post("/v1/chat/completions", json={"model": "sim", "messages": MESSAGES, "max_tokens": 40}).json()
    check(body, "CreateChatCompletionResponse")


def test_every_stream_chunk_is_a_create_chat_completion_stream_response(server: LiveServer) -> None:
    request = {
        "model": "sim",
        "messages": MESSAGES,
        "max_tokens": 40,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with server.http() as http:
        lines = http.post("/v1/chat/completions", json=request).text.splitlines()
    chunks = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    assert len(chunks) > 3 and "data: [DONE]" in lines
    for chunk in chunks:
        check(chunk, "CreateChatCompletionStreamResponse")


def test_models_and_errors_match_too(server: LiveServer) -> None:
    with server.http() as http:
        check(http.get("/v1/models").json(), "ListModelsResponse")
        for response in (
            http.post("/v1/chat/completions", json={"model": "sim"}),
            http.post("/v1/chat/completions", json={"model": "nope", "messages": MESSAGES}),
            http.delete("/v1/models"),
        ):
            assert response.status_code >= 400
            check(response.json(), "ErrorResponse")


def test_the_check_can_fail() -> None:
    with pytest.raises(AssertionError, match="refusal"):
        check(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "logprobs": None,
                        "message": {"role": "assistant", "content": "hi"},
                    }
                ],
            },
            "CreateChatCompletionResponse",
        )
