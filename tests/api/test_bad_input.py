"""Every kind of bad input through the real server: the exact status and an OpenAI error object, never a 500."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.conftest import LiveServer

MESSAGES = [{"role": "user", "content": "Say something about queues."}]
CHAT = "/v1/chat/completions"
ERROR_TYPES = {401: "authentication_error", 500: "server_error", 503: "server_error"}


def post(live: LiveServer, body: object, path: str = CHAT, **kwargs) -> httpx.Response:
    """POST `body` as JSON that may hold NaN or escaped lone surrogates, which httpx's json= refuses."""
    return httpx.post(
        live.url + path,
        content=json.dumps(body),
        timeout=kwargs.pop("timeout", 30),
        headers={"Content-Type": "application/json", **kwargs.pop("headers", {})},
        **kwargs,
    )


def assert_error(
    response: httpx.Response, status: int, *, param: str | None, code: str | None, names: str | None = None
) -> dict:
    """The OpenAI error object, exactly; its message names `names` (by default the parameter)."""
    assert response.status_code == status, response.text
    assert "Traceback" not in response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert list(body) == ["error"]
    error = body["error"]
    assert sorted(error) == ["code", "message", "param", "type"]
    assert (error["param"], error["code"]) == (param, code), error
    assert error["type"] == ERROR_TYPES.get(status, "invalid_request_error")
    assert isinstance(error["message"], str) and error["message"]
    named = names or param
    if named:
        assert named in error["message"], error["message"]
    return error


def assert_idle(live: LiveServer, **params: str) -> None:
    """Nothing queued, nothing running, every slot and KV token free: no error leaves a stuck slot.
    `params` (e.g. token=KEY) go with the status call on a server that needs a key."""
    deadline = time.monotonic() + 10
    while (status := live.status(**params))["waiting_total"] or status["running"]:
        assert time.monotonic() < deadline, f"the queue never became idle; last: {status}"
        time.sleep(0.02)
    assert status["free_slots"] == status["slots"] and status["tokens_in_use"] == 0


# -- the body is not a JSON object -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b"",
        b"\xff\xfe\x00",
        b'{"model": "sim", "messages": [',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"model": "sim", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1' + b"0" * 5000 + b"}",
    ],
    ids=["malformed", "empty", "bad-utf8", "truncated", "nested-too-deep", "integer-over-digit-limit"],
)
def test_unparseable_body_is_400_invalid_json(server, raw):
    response = httpx.post(server.url + CHAT, content=raw, headers={"Content-Type": "application/json"})
    assert_error(response, 400, param=None, code="invalid_json", names="not valid JSON")
    assert_idle(server)


@pytest.mark.parametrize("body", [[MESSAGES[0]], "hello", 42, None, True])
def test_body_that_is_not_an_object_is_400(server, body):
    assert_error(post(server, body), 400, param=None, code="invalid_json", names="JSON object")


# -- each parameter's type and range -----------------------------------------------------------------------------

BAD_FIELDS = [
    ({}, "model"),
    ({"messages": MESSAGES}, "model"),
    ({"model": "sim", "messages": [{"role": "user"}]}, "messages.0.content"),
    ({"model": "sim", "messages": [{"role": "user", "content": None}]}, "messages.0.content"),
    ({"model": "sim", "messages": [{"role": "user", "content": []}]}, "messages.0.content"),
    ({"seed": 2**70}, "seed"),
    ({"seed": -(2**70)}, "seed"),
    ({"model": "sim", "messages": []}, "messages"),
    ({"model": "sim", "messages": "hi"}, "messages"),
    ({"model": "sim", "messages": {"role": "user", "content": "hi"}}, "messages"),
    ({"model": "sim", "messages": [None]}, "messages.0"),
    ({"model": "sim", "messages": ["hi"]}, "messages.0"),
    ({"model": "sim", "messages": [{"content": "hi"}]}, "messages.0.role"),
    ({"model": "sim", "messages": [{"role": "function", "content": "hi"}]}, "messages.0.role"),
    ({"model": "sim", "messages": [{"role": "tool", "content": "hi"}]}, "messages.0"),
    ({"model": "sim", "messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
    ({"model": "sim", "messages": [{"role": "user", "content": "\ud800"}]}, "messages.0.content"),
    (
        {"model": "sim", "messages": [{"role": "user", "content": [{"type": "text", "text": "a\udfff"}]}]},
        "messages.0.content.0.text",
    ),
    ({"model": "sim", "messages": MESSAGES, "metadata": {"\ud800": "\udc00"}}, "metadata"),
    (
        {
            "model": "sim",
            "messages": MESSAGES,
            "tools": [{"type": "function", "function": {"name": "f", "description": "\ud800"}}],
        },
        "tools.0.function.description",
    ),
    (
        {
            "model": "sim",
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}],
        },
        "messages.0.content.0.type",
    ),
    ({"model": "sim", "messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages.0.content.0.text"),
    ({"max_tokens": "12"}, "max_tokens"),
    ({"max_tokens": 12.0}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": -5}, "max_tokens"),
    ({"max_completion_tokens": -1}, "max_completion_tokens"),
    ({"max_completion_tokens": "8"}, "max_completion_tokens"),
    ({"temperature": 3}, "temperature"),
    ({"temperature": -0.1}, "temperature"),
    ({"temperature": "0.5"}, "temperature"),
    ({"temperature": float("nan")}, "temperature"),
    ({"temperature": float("inf")}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"stream": "yes"}, "stream"),
    ({"stream": 1}, "stream"),
    ({"stream_options": "usage"}, "stream_options"),
    ({"stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
    ({"stop": 5}, "stop"),
    ({"stop": [1, 2]}, "stop.0"),
    ({"seed": "x"}, "seed"),
    ({"model": 5}, "model"),
    ({"n": "2"}, "n"),
    ({"user": 5}, "user"),
    ({"priority": True}, "priority"),
    ({"priority": 2.5}, "priority"),
    ({"request_id": "a b/c"}, "request_id"),
    ({"request_id": "ünïcode"}, "request_id"),
    ({"request_id": ""}, "request_id"),
    ({"request_id": "x" * 129}, "request_id"),
    ({"request_id": 7}, "request_id"),
]


@pytest.mark.parametrize("fields, param", BAD_FIELDS, ids=[f"{i:02d}-{p}" for i, (_, p) in enumerate(BAD_FIELDS)])
def test_bad_field_is_400_naming_the_parameter(server, fields, param):
    body = (
        fields
        if "messages" in fields or "model" in fields or not fields
        else {"model": "sim", "messages": MESSAGES, **fields}
    )
    error = assert_error(post(server, body), 400, param=param, code="invalid_value")
    assert error["message"].startswith(("invalid value for", "missing required parameter"))
    assert_idle(server)


def test_validation_message_keeps_the_case_of_the_allowed_pattern(server):
    error = assert_error(
        post(server, {"model": "sim", "messages": MESSAGES, "request_id": "a b"}),
        400,
        param="request_id",
        code="invalid_value",
    )
    assert "A-Za-z0-9" in error["message"]


def test_more_than_four_stop_sequences_is_400(server):
    response = post(server, {"model": "sim", "messages": MESSAGES, "stop": ["a", "b", "c", "d", "e"]})
    assert_error(response, 400, param="stop", code="invalid_value")
    assert (
        post(server, {"model": "sim", "messages": MESSAGES, "max_tokens": 3, "stop": ["a", "b", "c", "d"]}).status_code
        == 200
    )


@pytest.mark.parametrize("n", [2, 0, -1, 100])
def test_only_n_1_is_supported(server, n):
    assert_error(
        post(server, {"model": "sim", "messages": MESSAGES, "n": n}),
        400,
        param="n",
        code="invalid_value",
        names=f"n={n}",
    )


def test_n_1_and_n_null_are_accepted(server):
    for n in (1, None):
        assert post(server, {"model": "sim", "messages": MESSAGES, "max_tokens": 3, "n": n}).status_code == 200


@pytest.mark.parametrize("param", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("value", [10**9, 4097, 10**30])
def test_absurd_max_tokens_is_400_naming_it(server, param, value):
    error = assert_error(
        post(server, {"model": "sim", "messages": MESSAGES, param: value}), 400, param=param, code="invalid_value"
    )
    assert str(value) in error["message"] and "4096" in error["message"]
    assert_idle(server)


def test_max_completion_tokens_wins_over_max_tokens(server):
    response = post(server, {"model": "sim", "messages": MESSAGES, "max_tokens": 3, "max_completion_tokens": 10**9})
    assert_error(response, 400, param="max_completion_tokens", code="invalid_value")
    ok = post(server, {"model": "sim", "messages": MESSAGES, "max_tokens": 10**9, "max_completion_tokens": 3})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] <= 3


# -- through the official client ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, param",
    [
        ({"temperature": 3}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"n": 2}, "n"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"max_completion_tokens": 10**9}, "max_completion_tokens"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"extra_body": {"max_tokens": "12"}}, "max_tokens"),
        ({"extra_body": {"priority": "urgent"}}, "priority"),
        ({"max_tokens": 4, "extra_body": {"min_tokens": 5}}, "min_tokens"),
        ({"extra_body": {"chat_template_kwargs": {"chat_template": "{{ 1 }}"}}}, "chat_template_kwargs.chat_template"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_openai_client_raises_bad_request(server, kwargs, param, stream):
    with server.client() as client, pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="sim", messages=MESSAGES, stream=stream, **kwargs)
    assert err.value.status_code == 400
    assert err.value.body["param"] == param and param in err.value.body["message"]
    assert_idle(server)


def test_streaming_request_with_bad_input_gets_a_json_error_not_a_stream(server):
    response = post(server, {"model": "sim", "messages": MESSAGES, "stream": True, "temperature": 9})
    assert_error(response, 400, param="temperature", code="invalid_value")


# -- model, mode, priority, request ids, routes ------------------------------------------------------------------


def test_unknown_model_is_404_model_not_found(server):
    assert_error(
        post(server, {"model": "gpt-5", "messages": MESSAGES}),
        404,
        param="model",
        code="model_not_found",
        names="'gpt-5'",
    )
    with server.client() as client, pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="gpt-5", messages=MESSAGES, stream=True)
    assert err.value.body["code"] == "model_not_found" and err.value.body["param"] == "model"


@pytest.mark.parametrize("mode", ["foo", "", "BATCH"])
def test_unknown_mode_is_400(server, mode):
    response = post(server, {"model": "sim", "messages": MESSAGES}, params={"mode": mode})
    assert_error(response, 400, param="mode", code="invalid_value", names="mode must be")


def test_interactive_mode_is_accepted(server):
    response = post(server, {"model": "sim", "messages": MESSAGES, "max_tokens": 3}, params={"mode": "interactive"})
    assert response.status_code == 200 and response.headers["x-priority"] == "medium"


@pytest.mark.parametrize("header", ["urgent", "", "1", "highest"])
@pytest.mark.parametrize("stream", [False, True])
def test_unknown_x_priority_header_is_400(server, header, stream):
    response = post(server, {"model": "sim", "messages": MESSAGES, "stream": stream}, headers={"X-Priority": header})
    assert_error(response, 400, param="X-Priority", code="invalid_priority")
    assert_idle(server)


@pytest.mark.parametrize("priority", [11, -1, 10**30, "urgent", "", "1"])
def test_bad_body_priority_is_400(server, priority):
    response = post(server, {"model": "sim", "messages": MESSAGES, "priority": priority})
    assert_error(response, 400, param="priority", code="invalid_priority", names="priority must be")
    assert_idle(server)


@pytest.mark.parametrize(
    "priority, cls",
    [
        (0, "low"),
        (4, "low"),
        (5, "medium"),
        (7, "medium"),
        (10, "high"),
        ("HIGH", "high"),
        (" low ", "low"),
        ("medium", "medium"),
    ],
)
def test_body_priority_integer_or_name_is_accepted(server, priority, cls):
    response = post(server, {"model": "sim", "messages": MESSAGES, "max_tokens": 3, "priority": priority})
    assert response.status_code == 200 and response.headers["x-priority"] == cls


def test_x_priority_header_outranks_body_priority_and_batch_mode_outranks_both(server):
    body = {"model": "sim", "messages": MESSAGES, "max_tokens": 3, "priority": "low"}
    assert post(server, body, headers={"X-Priority": "High"}).headers["x-priority"] == "high"
    batch = post(server, body, headers={"X-Priority": "high"}, params={"mode": "batch"})
    assert batch.headers["x-priority"] == "low"


@pytest.mark.parametrize("header", ["a b", "a/b", "x" * 129, "id;drop"])
def test_invalid_x_request_id_header_is_400(server, header):
    response = post(server, {"model": "sim", "messages": MESSAGES, "max_tokens": 3}, headers={"X-Request-ID": header})
    assert_error(response, 400, param="X-Request-ID", code="invalid_value")
    assert server.status(request_id=header[:128])["state"] == "unknown"
    assert_idle(server)


def test_valid_body_request_id_wins_over_a_bad_header(server):
    response = post(
        server,
        {"model": "sim", "messages": MESSAGES, "max_tokens": 3, "request_id": "body-id.1:a_b-c"},
        headers={"X-Request-ID": "not valid"},
    )
    assert response.status_code == 200 and response.json()["id"] == "body-id.1:a_b-c"


@pytest.mark.parametrize(
    "method, path, status",
    [
        ("GET", "/v1/nope", 404),
        ("POST", "/v1/embeddings", 404),
        ("GET", "/", 404),
        ("GET", CHAT, 405),
        ("DELETE", "/v1/models", 405),
    ],
)
def test_unknown_route_or_method_is_an_openai_error(server, method, path, status):
    response = httpx.request(method, server.url + path)
    assert_error(response, status, param=None, code="not_found" if status == 404 else None)
    assert "x-request-id" in response.headers


# -- limits of the model, the engine and the body ----------------------------------------------------------------


def test_prompt_over_the_context_is_context_length_exceeded(make_server):
    live = make_server("engine.sim.max_model_len=64")
    long = [{"role": "user", "content": "queue " * 200}]
    error = assert_error(
        post(live, {"model": "sim", "messages": long}), 400, param="messages", code="context_length_exceeded"
    )
    assert "64" in error["message"]
    error = assert_error(
        post(live, {"model": "sim", "messages": MESSAGES, "max_tokens": 60}),
        400,
        param="messages",
        code="context_length_exceeded",
        names="max_tokens asks for 60",
    )
    assert_error(
        post(live, {"model": "sim", "messages": MESSAGES, "max_tokens": 65}),
        400,
        param="max_tokens",
        code="invalid_value",
    )
    with live.client() as client, pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="sim", messages=long, stream=True)
    assert err.value.body["code"] == "context_length_exceeded"
    fits = post(live, {"model": "sim", "messages": MESSAGES})
    assert fits.status_code == 200
    assert fits.json()["usage"]["total_tokens"] <= 64
    assert_idle(live)


def test_request_over_the_engine_kv_budget_names_the_parameter_sent(make_server):
    live = make_server("engine.sim.kv_tokens=64")
    for param in ("max_tokens", "max_completion_tokens"):
        assert_error(
            post(live, {"model": "sim", "messages": MESSAGES, param: 100}),
            400,
            param=param,
            code="context_length_exceeded",
            names="at most 64",
        )
    long = [{"role": "user", "content": "queue " * 100}]
    assert_error(
        post(live, {"model": "sim", "messages": long}),
        400,
        param="messages",
        code="context_length_exceeded",
        names="at most 64",
    )
    # without max_tokens the default answer length shrinks to what the engine can hold
    fits = post(live, {"model": "sim", "messages": MESSAGES})
    assert fits.status_code == 200, fits.text
    assert fits.json()["usage"]["total_tokens"] <= 64
    assert_idle(live)


def _chunks(data: bytes, size: int = 512) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def test_body_over_the_limit_is_413_with_or_without_content_length(make_server):
    live = make_server("server.max_body_bytes=2048")
    big = json.dumps({"model": "sim", "messages": [{"role": "user", "content": "x" * 6000}]}).encode()
    declared = httpx.post(live.url + CHAT, content=big, headers={"Content-Type": "application/json"})
    assert int(declared.request.headers["content-length"]) > 2048
    assert_error(declared, 413, param=None, code="request_too_large", names="2048 bytes")
    assert declared.headers["connection"] == "close"
    chunked = httpx.post(live.url + CHAT, content=_chunks(big), headers={"Content-Type": "application/json"})
    assert chunked.request.headers["transfer-encoding"] == "chunked"
    assert_error(chunked, 413, param=None, code="request_too_large", names="2048 bytes")
    small = json.dumps({"model": "sim", "messages": MESSAGES, "max_tokens": 3}).encode()
    assert (
        httpx.post(
            live.url + CHAT, content=_chunks(small, 16), headers={"Content-Type": "application/json"}
        ).status_code
        == 200
    )
    assert_error(httpx.post(live.url + "/v1/nope", content=big), 413, param=None, code="request_too_large")
    assert_idle(live)


# -- a request_id already in flight ------------------------------------------------------------------------------

SLOW = "engine.sim.token_latency_ms=50"
HOLD = {
    "model": "sim",
    "messages": [{"role": "user", "content": "Hold this slot."}],
    "temperature": 0,
    "seed": 4,
}  # ~340 tokens


def test_duplicate_in_flight_request_id_is_400_while_streaming(make_server):
    live = make_server(SLOW)
    with httpx.Client(base_url=live.url, timeout=30) as client:
        with client.stream(
            "POST", CHAT, json={**HOLD, "max_tokens": 300, "stream": True, "request_id": "dup-1"}
        ) as first:
            assert first.status_code == 200
            assert live.status(request_id="dup-1")["state"] in ("queued", "running")
            again = post(live, {"model": "sim", "messages": MESSAGES, "max_tokens": 3, "request_id": "dup-1"})
            assert_error(again, 400, param="request_id", code="duplicate_request_id", names="'dup-1'")
            by_header = post(
                live, {"model": "sim", "messages": MESSAGES, "max_tokens": 3}, headers={"X-Request-ID": "dup-1"}
            )
            assert_error(by_header, 400, param="request_id", code="duplicate_request_id")
            assert live.status(request_id="dup-1")["state"] == "running"
    assert_idle(live)  # leaving the stream frees its slot
    reused = post(live, {"model": "sim", "messages": MESSAGES, "max_tokens": 2, "request_id": "dup-1"})
    assert reused.status_code == 200 and reused.json()["id"] == "dup-1"


def test_duplicate_in_flight_request_id_is_400_while_a_plain_request_runs(make_server):
    live = make_server(SLOW)
    results: list[httpx.Response] = []
    worker = threading.Thread(
        target=lambda: results.append(post(live, {**HOLD, "max_tokens": 40}, headers={"X-Request-ID": "dup-2"}))
    )
    worker.start()
    try:
        live.wait_for(lambda s: s["running"] == 1)
        again = post(
            live, {"model": "sim", "messages": MESSAGES, "max_tokens": 3, "request_id": "dup-2", "stream": True}
        )
        assert_error(again, 400, param="request_id", code="duplicate_request_id")
        assert live.status(request_id="dup-2")["state"] == "running"
    finally:
        worker.join(timeout=30)
    assert results[0].status_code == 200 and results[0].json()["usage"]["completion_tokens"] == 40
    assert_idle(live)


def test_a_client_that_leaves_while_sending_its_body_is_counted_quietly(make_server, caplog, monkeypatch):
    monkeypatch.setattr(logging.getLogger("gpt_oss_webui"), "propagate", True)
    caplog.set_level(logging.WARNING)
    live = make_server()
    host, port = live.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"model"'
        )
        time.sleep(0.3)
    deadline = time.monotonic() + 5
    while 'gptoss_requests_abandoned_total{stage="body"} 1.0' not in httpx.get(live.url + "/metrics").text:
        assert time.monotonic() < deadline, "the abandoned request was never counted"
        time.sleep(0.05)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert_idle(live)


@pytest.mark.parametrize(
    "kind", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x", "text/plain;charset=UTF-8"]
)
def test_a_body_that_is_not_json_is_415(server, kind):
    """What a cross-site page can send without a CORS preflight never reaches the engine."""
    body = json.dumps({"model": "sim", "messages": MESSAGES, "max_tokens": 2})
    response = httpx.post(server.url + CHAT, content=body, headers={"Content-Type": kind}, timeout=10)
    assert_error(response, 415, param="Content-Type", code="unsupported_media_type")
    ok = httpx.post(server.url + CHAT, content=body, headers={"Content-Type": "application/json; charset=utf-8"})
    assert ok.status_code == 200


def test_cross_origin_calls_get_no_cors_grant_unless_configured(server, make_server):
    for origin in ("http://localhost:3000", "http://evil.example", "null"):
        preflight = httpx.options(
            server.url + CHAT, headers={"Origin": origin, "Access-Control-Request-Method": "POST"}
        )
        assert "access-control-allow-origin" not in preflight.headers, origin
        plain = httpx.get(server.url + "/v1/models", headers={"Origin": origin})
        assert "access-control-allow-origin" not in plain.headers, origin
    live = make_server("server.cors_origins=[https://app.example]")
    granted = httpx.get(live.url + "/v1/models", headers={"Origin": "https://app.example"})
    assert granted.headers["access-control-allow-origin"] == "https://app.example"
    assert "access-control-allow-credentials" not in granted.headers
    assert (
        "access-control-allow-origin"
        not in httpx.get(live.url + "/v1/models", headers={"Origin": "http://evil.example"}).headers
    )


def raw_exchange(live: LiveServer, data: bytes, wait_s: float = 3.0) -> bytes:
    host, port = live.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait_s) as sock:
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return received


def assert_openai_error(answer: bytes, code: str) -> None:
    """Refused by the connection layer, still an OpenAI error object like every other error."""
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower()
    error = json.loads(body)["error"]
    assert error["code"] == code and error["message"] and sorted(error) == ["code", "message", "param", "type"]


def test_headers_past_the_limit_are_431(make_server):
    live = make_server("server.max_header_bytes=4096")
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(2000))
    answer = raw_exchange(live, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert_openai_error(answer, "headers_too_large")
    one = raw_exchange(live, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 10_000 + b"\r\n\r\n")
    assert one.startswith(b"HTTP/1.1 431 ")
    assert httpx.get(live.url + "/v1/models").status_code == 200  # ordinary requests are untouched


def test_slow_headers_and_short_bodies_are_cut_off(make_server):
    live = make_server("server.header_timeout_s=0.5", "server.body_timeout_s=0.5")
    started = time.monotonic()
    slow = raw_exchange(live, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: ", wait_s=5)
    assert slow.startswith(b"HTTP/1.1 408 ") and time.monotonic() - started < 4
    assert_openai_error(slow, "request_timeout")
    short = raw_exchange(
        live,
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
        b'\r\nContent-Length: 100\r\n\r\n{"model"',
        wait_s=5,
    )
    assert short.startswith(b"HTTP/1.1 408 ")
    silent = raw_exchange(live, b"", wait_s=5)  # connects and says nothing
    assert silent.startswith(b"HTTP/1.1 408 ")
    assert_idle(live)
