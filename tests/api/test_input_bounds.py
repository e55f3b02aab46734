"""What a request carries cannot reach a library unbounded, over real HTTP on the simulator: deep
schemas and template kwargs, large schemas, backtracking patterns, unsatisfiable schemas and bodies
without a JSON Content-Type are each a 4xx in OpenAI's shape with one log line at most, answered
while another request keeps streaming; the event loop never stalls."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from protocols.json_bounds import JsonBounds, depth
from tests.api.test_bad_input import assert_error, assert_idle, post
from tests.conftest import LiveServer, live_server

MESSAGES = [{"role": "user", "content": "Fill in the form."}]
BOMB = {"type": "string", "pattern": "^([a-z ]+)+!$", "minLength": 24}  # refused by construct
SLOW = {"type": "string", "pattern": "^(.*a){12}!$", "minLength": 24}  # not by construct: polynomial, of degree 12


def nested(levels: int) -> dict[str, Any]:
    """A schema `levels` deep: arrays of arrays down to a string."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels - 1):
        schema = {"type": "array", "items": schema, "minItems": 1, "maxItems": 1}
    return schema


def tool(parameters: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "fill", "parameters": parameters}}]


def output(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "form", "schema": schema}}


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "sim", "messages": MESSAGES, "max_tokens": 40, **fields}


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    with live_server("engine.sim.token_latency_ms=5") as server:
        yield server


@pytest.fixture
def streaming(live: LiveServer) -> Iterator[list[float]]:
    """A request streaming the whole time, its tokens' arrival times in the list."""
    arrivals: list[float] = []

    def read() -> None:
        body = chat(max_tokens=400, stream=True, messages=[{"role": "user", "content": "Tell a long story."}])
        with httpx.stream("POST", live.url + "/v1/chat/completions", json=body, timeout=30) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    arrivals.append(time.monotonic())

    reader = threading.Thread(target=read)
    reader.start()
    while not arrivals:
        time.sleep(0.01)
    yield arrivals
    reader.join(timeout=30)
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    assert len(arrivals) > 100 and max(gaps) < 1.0, max(gaps)  # no stall while the bad requests came


def quiet(caplog: pytest.LogCaptureFixture) -> None:
    """No traceback, no error: at most an info line per refusal."""
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info] == []


@pytest.mark.parametrize(
    "path, body, param",
    [
        ("/v1/chat/completions", chat(tools=tool(nested(150))), "tools[0].function.parameters"),
        ("/v1/chat/completions", chat(response_format=output(nested(100))), "response_format.json_schema.schema"),
        ("/v1/chat/completions", chat(chat_template_kwargs=nested(300)), "chat_template_kwargs"),
        ("/tokenize", {"messages": MESSAGES, "tools": tool(nested(150))}, "tools[0].function.parameters"),
        (
            "/v1/responses",
            {
                "model": "sim",
                "input": "hi",
                "text": {"format": {"type": "json_schema", "name": "f", "schema": nested(120)}},
            },
            "text.format.schema",
        ),
        (
            "/v1/responses",
            {"model": "sim", "input": "hi", "tools": [{"type": "function", "name": "f", "parameters": nested(120)}]},
            "tools[0].parameters",
        ),
        ("/v1/responses", {"model": "sim", "input": "hi", "client_metadata": nested(200)}, "client_metadata"),
    ],
)
def test_deep_json_is_a_400_naming_where(live, streaming, caplog, path, body, param):
    caplog.set_level(logging.INFO)
    started = time.monotonic()
    assert_error(post(live, body, path), 400, param=param, code="invalid_value", names="nest at most")
    assert time.monotonic() - started < 2
    quiet(caplog)


def test_the_depth_bound_is_the_setting_and_a_schema_at_it_passes(make_server):
    live = make_server("server.max_json_depth=12")
    assert post(live, chat(response_format=output(nested(12)))).status_code == 200
    assert_error(
        post(live, chat(response_format=output(nested(13)))),
        400,
        param="response_format.json_schema.schema",
        code="invalid_value",
        names="12 levels",
    )


def test_schemas_over_the_size_bound_are_a_400(make_server):
    live = make_server("server.max_schema_bytes=2048")
    props = {f"field_{i}": {"type": "string", "description": "x" * 40} for i in range(30)}
    big = {"type": "object", "properties": props}
    error = assert_error(
        post(live, chat(tools=tool(big))),
        400,
        param="tools[0].function.parameters",
        code="invalid_value",
        names="2048 bytes",
    )
    assert "server.max_schema_bytes" in error["message"]
    half = {"type": "object", "properties": dict(list(props.items())[:12])}
    assert post(live, chat(tools=tool(half))).status_code == 200
    both = chat(tools=tool(half), response_format=output(half))  # the request's schemas count together
    assert_error(post(live, both), 400, param="response_format.json_schema.schema", code="invalid_value")


def test_a_large_schema_within_the_bound_is_checked_and_answered(live):
    props = {f"field_{i}": {"type": "integer", "minimum": 0, "maximum": 9} for i in range(800)}
    schema = {"type": "object", "properties": props, "required": ["field_0"]}
    # 800 fields at 5 ms a token: 13.6 s beside a CPU hog here, so a slower machine gets four minutes
    response = post(live, chat(response_format=output(schema), max_tokens=4000), timeout=240)
    assert response.status_code == 200, response.text
    bad = {**schema, "required": "field_0"}  # not a valid schema: still a 400 after the check off the loop
    assert_error(
        post(live, chat(response_format=output(bad))),
        400,
        param="response_format.json_schema.schema",
        code="invalid_value",
        names="JSON Schema",
    )


@pytest.mark.parametrize("field", ["response_format", "tools"])
def test_a_backtracking_pattern_is_refused_by_construct_naming_where(live, caplog, field):
    body = (
        chat(response_format=output(BOMB))
        if field == "response_format"
        else chat(tools=tool({"type": "object", "properties": {"s": BOMB}, "required": ["s"]}), tool_choice="required")
    )
    where = "response_format.json_schema.schema" if field == "response_format" else "tools[0].function.parameters"
    assert_error(post(live, body), 400, param=where, code="invalid_value", names="exponential")
    words = {"type": "string", "pattern": "^[a-z]+( [a-z]+)*$"}  # nested, yet each repeat starts with a space
    assert post(live, chat(response_format=output(words))).status_code == 200
    quiet(caplog)


@pytest.mark.parametrize("field", ["response_format", "tools"])
def test_a_slow_pattern_is_refused_quickly_without_stalling_the_server(live, streaming, caplog, field):
    caplog.set_level(logging.INFO)
    body = (
        chat(response_format=output(SLOW))
        if field == "response_format"
        else chat(tools=tool({"type": "object", "properties": {"s": SLOW}, "required": ["s"]}), tool_choice="required")
    )
    started = time.monotonic()
    response = post(live, body)
    assert time.monotonic() - started < 2
    assert_error(response, 400, param=None, code="upstream_rejected", names="cannot be met")
    assert httpx.get(live.url + "/livez", timeout=1).status_code == 200
    quiet(caplog)
    assert_idle(live)


def test_a_schema_that_retries_deep_or_asks_for_a_huge_value_is_refused_in_bounded_time(live, streaming, caplog):
    unique: dict[str, Any] = {"const": 1}
    # each level retries its items for uniqueness (two distinct const items cannot be): 20 ** 7 tries unbounded
    for _ in range(7):
        unique = {"type": "array", "uniqueItems": True, "minItems": 2, "maxItems": 3, "items": unique}
    for schema in (unique, {"type": "string", "minLength": 10**9}, {"type": "array", "minItems": 10**9}):
        started = time.monotonic()
        assert_error(
            post(live, chat(response_format=output(schema))),
            400,
            param=None,
            code="upstream_rejected",
            names="cannot be met",
        )
        assert time.monotonic() - started < 2
    quiet(caplog)


def test_a_pattern_nothing_matches_is_a_400_naming_the_schema(live, caplog):
    never = {"type": "string", "pattern": "^(?!)$"}
    for body, names in [
        (chat(response_format=output(never)), "response_format"),
        (
            chat(tools=tool({"type": "object", "properties": {"s": never}, "required": ["s"]}), tool_choice="required"),
            "tool call",
        ),
    ]:
        assert_error(post(live, body), 400, param=None, code="upstream_rejected", names=names)
    quiet(caplog)


@pytest.mark.parametrize("headers", [{}, {"Content-Type": ""}, {"Content-Type": "text/plain"}])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/tokenize", "/v1/cache/feedback"])
def test_a_post_without_a_json_content_type_is_415(live, path, headers):
    """A Blob with no type is what a cross-site page sends without a preflight."""
    response = httpx.post(
        live.url + path, content=b'{"model": "sim", "input": "hi", "messages": []}', headers=headers, timeout=10
    )
    assert_error(response, 415, param="Content-Type", code="unsupported_media_type")


def test_depth_counts_levels_without_recursing():
    assert [depth(v, 10) for v in (1, "s", [], {}, [[]], {"a": [1, {"b": None}]})] == [0, 0, 1, 1, 2, 3]
    assert depth(nested(5000), 40) == 41  # stops past the bound, whatever lies deeper
    assert JsonBounds(max_depth=4).check({"response_format": output(nested(4))}) > 0
