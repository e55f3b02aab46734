"""API keys and priority keys through the real server: who may call, and which class each call gets."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.api.test_bad_input import CHAT, MESSAGES, assert_error, assert_idle
from tests.conftest import LiveServer

KEYED = ("server.api_keys=[k1]", "scheduler.priority_keys=[vip]")
BODY = {"model": "sim", "messages": MESSAGES, "max_tokens": 3}


@pytest.fixture
def keyed(make_server) -> LiveServer:
    """A closed server: k1 may call, vip may call at high priority."""
    return make_server(*KEYED)


def chat(
    live: LiveServer,
    key: str | None = None,
    token: str | None = None,
    body: dict | None = None,
    headers: dict[str, str] | None = None,
    **params: str,
) -> httpx.Response:
    headers = {**({"Authorization": f"Bearer {key}"} if key is not None else {}), **(headers or {})}
    if token is not None:
        params["token"] = token
    return httpx.post(live.url + CHAT, json=BODY if body is None else body, headers=headers, params=params, timeout=30)


# -- a closed server ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, token, authorization",
    [
        (None, None, None),
        ("wrong", None, None),
        (None, "wrong", None),
        (None, None, "Basic azE6"),
        (None, None, "k1"),
        (None, None, "Bearer"),
        ("k1 extra", None, None),
    ],
    ids=["no-key", "wrong-bearer", "wrong-token", "basic-auth", "no-scheme", "bare-bearer", "key-with-junk"],
)
def test_missing_or_wrong_key_is_401(keyed, key, token, authorization):
    headers = {"Authorization": authorization} if authorization is not None else {}
    response = chat(keyed, key, token, headers=headers)
    assert_error(response, 401, param=None, code="invalid_api_key", names="API key")
    assert_idle(keyed, token="k1")


def test_401_comes_before_the_body_is_read(keyed):
    response = httpx.post(keyed.url + CHAT, content=b"{not json", headers={"Content-Type": "application/json"})
    assert_error(response, 401, param=None, code="invalid_api_key")
    response = httpx.post(
        keyed.url + CHAT, json={"model": "sim", "messages": [], "n": 5}, headers={"X-Priority": "bogus"}
    )
    assert_error(response, 401, param=None, code="invalid_api_key")


def test_every_v1_route_needs_a_key(keyed):
    for path in ("/v1/models", "/v1/queue/status"):
        assert_error(httpx.get(keyed.url + path), 401, param=None, code="invalid_api_key")
        assert httpx.get(keyed.url + path, headers={"Authorization": "Bearer k1"}).status_code == 200
        assert httpx.get(keyed.url + path, params={"token": "vip"}).status_code == 200
    assert httpx.get(keyed.url + "/healthz").status_code == 200


def test_openai_client_with_a_wrong_key_raises_authentication_error(keyed):
    with keyed.client(api_key="nope") as client:
        with pytest.raises(openai.AuthenticationError) as err:
            client.chat.completions.create(model="sim", messages=MESSAGES, max_tokens=3)
        assert err.value.status_code == 401 and err.value.body["code"] == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            client.models.list()


def test_plain_key_runs_at_medium(keyed):
    response = chat(keyed, "k1")
    assert response.status_code == 200 and response.headers["x-priority"] == "medium"
    with keyed.client(api_key="k1") as client:
        raw = client.chat.completions.with_raw_response.create(model="sim", messages=MESSAGES, max_tokens=3)
    assert raw.headers["x-priority"] == "medium" and raw.parse().choices[0].message.role == "assistant"


def test_priority_key_by_bearer_or_token_runs_at_high(keyed):
    assert chat(keyed, "vip").headers["x-priority"] == "high"
    assert chat(keyed, token="vip").headers["x-priority"] == "high"
    assert chat(keyed, "k1", token="vip").headers["x-priority"] == "high"  # ?token= is the key that counts
    for client in (keyed.client(api_key="vip"), keyed.client(api_key="k1", default_query={"token": "vip"})):
        with client:
            raw = client.chat.completions.with_raw_response.create(model="sim", messages=MESSAGES, max_tokens=3)
        assert raw.headers["x-priority"] == "high"


def test_token_that_is_not_known_is_401_even_with_a_good_bearer(keyed):
    assert_error(chat(keyed, "k1", token="nope"), 401, param=None, code="invalid_api_key")


@pytest.mark.parametrize("header, expected", [("low", "low"), ("medium", "medium"), ("HIGH", "high")])
def test_x_priority_header_outranks_the_priority_key(keyed, header, expected):
    response = chat(keyed, "vip", headers={"X-Priority": header})
    assert response.status_code == 200 and response.headers["x-priority"] == expected


def test_priority_key_outranks_body_priority_and_batch_mode_outranks_the_key(keyed):
    assert chat(keyed, "vip", body={**BODY, "priority": "low"}).headers["x-priority"] == "high"
    assert chat(keyed, "vip", body={**BODY, "priority": 0}).headers["x-priority"] == "high"
    assert chat(keyed, "k1", body={**BODY, "priority": "high"}).headers["x-priority"] == "high"
    assert chat(keyed, "vip", mode="batch").headers["x-priority"] == "low"


def test_priority_input_is_still_validated_for_a_priority_key(keyed):
    assert_error(chat(keyed, "vip", headers={"X-Priority": "top"}), 400, param="X-Priority", code="invalid_priority")
    assert_error(chat(keyed, "vip", body={**BODY, "priority": 99}), 400, param="priority", code="invalid_priority")
    assert_error(chat(keyed, "vip", mode="later"), 400, param="mode", code="invalid_value")
    # a bad value is refused even where a stronger source decides the class
    assert_error(
        chat(keyed, "vip", headers={"X-Priority": "low"}, body={**BODY, "priority": "top"}),
        400,
        param="priority",
        code="invalid_priority",
    )
    assert_error(
        chat(keyed, "k1", headers={"X-Priority": "top"}, mode="batch"), 400, param="X-Priority", code="invalid_priority"
    )
    assert_idle(keyed, token="vip")


# -- an open server ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [None, "sk-anything", "k1", "vip"])
def test_open_server_accepts_any_bearer_at_medium(server, key):
    response = chat(server, key)
    assert response.status_code == 200 and response.headers["x-priority"] == "medium"


def test_open_server_refuses_an_unknown_token(server):
    error = assert_error(chat(server, "sk-anything", token="unknown"), 401, param="token", code="invalid_api_key")
    assert "token" in error["message"]
    assert_error(
        httpx.get(server.url + "/v1/models", params={"token": "unknown"}), 401, param="token", code="invalid_api_key"
    )
    assert_idle(server)


def test_open_server_with_priority_keys(make_server):
    live = make_server("scheduler.priority_keys=[vip]")
    assert chat(live, "vip").headers["x-priority"] == "high"
    assert chat(live, token="vip").headers["x-priority"] == "high"
    assert chat(live, "sk-other").headers["x-priority"] == "medium"
    assert chat(live, "vip", headers={"X-Priority": "low"}).headers["x-priority"] == "low"
    assert_error(chat(live, "vip", token="nope"), 401, param="token", code="invalid_api_key")
    assert_idle(live)
