"""The sign-in form at the trust boundary, over raw HTTP: a post from another site is refused, the
session cookie's flags, signing out, and no admin unless one is named."""

from __future__ import annotations

import httpx
from gradio_client import Client

from tests.conftest import LiveServer
from tests.ui.test_page_keys import session

TEAM = "server.keys=[{name: alice, key: sk-alice-0001}, {name: bob, key: sk-bob-000001}]"


def post_sign_in(live: LiveServer, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(live.url + "/signin", data={"key": "sk-alice-0001"}, headers=headers, timeout=10)


def test_a_post_from_another_site_is_refused(make_ui_server) -> None:
    live = make_ui_server(TEAM)
    for headers in (
        {"Origin": "https://evil.example"},
        {"Referer": "https://evil.example/form.html"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Origin": live.url.replace("127.0.0.1", "localhost")},
    ):
        refused = post_sign_in(live, headers)
        assert refused.status_code == 403 and "gptoss_session" not in refused.cookies, headers
    for headers in ({"Origin": live.url}, {"Referer": live.url + "/signin"}, {"Sec-Fetch-Site": "same-origin"}, {}):
        assert post_sign_in(live, headers).status_code == 303, headers


def test_public_url_is_an_origin_of_its_own_and_https_makes_the_cookie_secure(make_ui_server) -> None:
    live = make_ui_server(TEAM, "server.public_url=https://llm.example")
    signed = post_sign_in(live, {"Origin": "https://llm.example"})
    assert signed.status_code == 303
    cookie = signed.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie and "secure" in cookie


def test_a_forwarded_proto_counts_only_when_trusted(make_ui_server) -> None:
    plain = make_ui_server(TEAM)
    cookie = post_sign_in(plain, {"X-Forwarded-Proto": "https"}).headers["set-cookie"].lower()
    assert "secure" not in cookie and "httponly" in cookie
    trusting = make_ui_server(TEAM, "server.forwarded_proto=true")
    assert "secure" in post_sign_in(trusting, {"X-Forwarded-Proto": "https"}).headers["set-cookie"].lower()


def test_signing_out_from_another_site_is_refused(make_ui_server) -> None:
    live = make_ui_server(TEAM)
    cookie = session(live, "sk-alice-0001")
    with httpx.Client(base_url=live.url, headers=cookie, timeout=10) as http:
        assert http.post("/signout", headers={"Origin": "https://evil.example"}).status_code == 403
        assert http.get("/config").status_code == 200
        assert http.post("/signout", headers={"Origin": live.url}).status_code == 303
        assert http.get("/config").status_code == 401


def test_without_a_named_admin_nobody_is_one(make_ui_server) -> None:
    live = make_ui_server(TEAM)
    bob = Client(live.url + "/", headers=session(live, "sk-bob-000001"), verbose=False)
    assert "admin" in bob.predict(1, 1, 30, api_name="/limits")
    assert live.services.scheduler.config.max_queue_size != 1
    headers = {"Authorization": "Bearer sk-bob-000001"}
    cleared = httpx.delete(live.url + "/v1/cache", headers=headers, timeout=10)
    assert cleared.status_code == 403 and cleared.json()["error"]["code"] == "admin_key_required"
    usage = httpx.get(live.url + "/v1/usage", params={"caller": "alice"}, headers=headers, timeout=10)
    assert usage.status_code == 403


def test_without_any_key_the_one_user_is_the_operator(make_ui_server) -> None:
    live = make_ui_server()
    assert Client(live.url + "/", verbose=False).predict(4, 60, 30, api_name="/limits").startswith("applied")
