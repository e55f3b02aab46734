"""The page behind the API's keys, checked over raw HTTP and with gradio_client (no browser): no
Gradio endpoint answers without a signed-in session, and a signed-in page runs as its caller."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator

import httpx
import pytest
from gradio_client import Client
from starlette.routing import BaseRoute, Mount

from pipeline.caller import key_name
from scheduler.events import QueueEvent
from tests.conftest import LiveServer
from tests.ui.conftest import UI, start_server

KEYS = ["server.api_keys=[k1secret]", "server.admin_keys=[admsecret]", "scheduler.priority_keys=[prisecret]"]
# respond(text, chat, system, priority, max_tokens, temperature, top_p, reasoning, timeout, language)
CHAT = ["hello page", [], "", "medium", 8, 0, 1, "medium", 300, "English"]


@pytest.fixture(scope="module")
def keyed() -> Iterator[LiveServer]:
    with contextlib.ExitStack() as stack:
        yield start_server(stack, UI, *KEYS)


def sign_in(live: LiveServer, key: str | None) -> httpx.Response:
    form = {"key": key} if key is not None else {"anonymous": "1"}
    return httpx.post(live.url + "/signin", data=form, follow_redirects=False, timeout=10)


def session(live: LiveServer, key: str) -> dict[str, str]:
    response = sign_in(live, key)
    assert response.status_code == 303 and response.headers["location"] == "/"
    return {"Cookie": f"gptoss_session={response.cookies['gptoss_session']}"}


# Path parameters filled in where the route wants a number or a name the page has; "x" elsewhere.
PARAMS = {"api_name": "respond", "component_id": "1", "fn_index": "0", "size": "1", "run": "1", "segment_id": "1"}
# What answers without a key: the sign-in form (GET to show it, POST to sign in) and the two probes.
ANONYMOUS = {("GET", "/signin"), ("POST", "/signin"), ("GET", "/livez"), ("GET", "/healthz")}
# Known to answer before the key is checked (nothing of anyone's data in it): kept here, checked to
# still answer so that the fix removes them, rather than left out of the walk unseen.
KNOWN_GAPS: dict[tuple[str, str], int] = {}  # a route found to answer without a key, until it is fixed


def every_route(routes: list[BaseRoute], prefix: str = "") -> list[tuple[str, str]]:
    """Every (method, path) an app serves and the apps mounted in it (Gradio's page) serve, with
    their path parameters filled in; HEAD, which each GET also answers, is left to its own checks."""
    out: list[tuple[str, str]] = []
    for route in routes:
        if isinstance(route, Mount):
            out += every_route(route.routes, prefix + route.path)
            continue
        path = re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: PARAMS.get(m[1], "x"), prefix + getattr(route, "path", ""))
        out += [
            (method, path or "/") for method in sorted(getattr(route, "methods", None) or {"GET"}) if method != "HEAD"
        ]
    return out


def answer(http: httpx.Client, method: str, path: str) -> int:
    """The status, 401 standing for a redirect to the sign-in form; the status alone, since some
    routes stream for as long as you listen."""
    body = {"data": CHAT, "fn_index": 0, "session_hash": "s", "event_data": None}
    with http.stream(method, path, json=body if method in ("POST", "PUT", "PATCH") else None) as response:
        to_sign_in = response.status_code == 303 and response.headers.get("location") == "/signin"
        return 401 if to_sign_in else response.status_code


def test_every_route_refuses_a_call_without_a_key(keyed: LiveServer) -> None:
    """Nothing is anonymous with keys set: no route of the app, the API's (/metrics, /docs and
    /openapi.json too) or the page's (its scripts, Gradio's heartbeat, cancel, upload and file
    routes), found from the app itself so a new one is covered; only the sign-in form, /livez and /healthz answer."""
    routes = every_route(keyed.server.config.app.routes)
    assert {
        ("GET", "/metrics"),
        ("GET", "/docs"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/gradio_api/upload"),
        ("GET", "/gradio_api/heartbeat/x"),
        ("GET", "/assets/x"),
    } <= set(routes)  # the walk reached into the mount
    with httpx.Client(base_url=keyed.url, timeout=10) as http:
        answers = {
            (method, path): answer(http, method, path) for method, path in routes if (method, path) not in ANONYMOUS
        }
        answered = {route: status for route, status in answers.items() if status not in (401, 403)}
        assert answered == KNOWN_GAPS, "\n".join(map(str, answered.items()))
        for path in (
            "/gradio_api/call/respond",
            "/gradio_api/queue/join",
            "/gradio_api/run/respond",
            "/gradio_api/cancel",
            "/gradio_api/upload",
        ):
            assert http.post(path, json={"data": CHAT, "fn_index": 0, "session_hash": "s"}).status_code == 401
        for path in ("/config", "/gradio_api/info", "/gradio_api/heartbeat/s", "/assets/index.js", "/theme.css"):
            assert http.get(path).status_code == 401, path
        for method, path in (("HEAD", "/openapi.json"), ("HEAD", "/docs"), ("POST", "/livez"), ("GET", "/tokenize")):
            assert http.request(method, path).status_code == 401, (method, path)  # not on to the page's own
        page = http.get("/")
        assert page.status_code == 303 and page.headers["location"] == "/signin"
        assert "API key" in http.get("/signin").text
        assert http.get("/livez").status_code == 200 and http.get("/healthz").status_code in (200, 503)


def test_gradio_client_needs_a_session(keyed: LiveServer) -> None:
    with pytest.raises(Exception):  # noqa: B017 - any refusal; gradio_client wraps the 401 differently by version
        Client(keyed.url + "/", verbose=False)
    bad = sign_in(keyed, "not-a-key")
    assert bad.status_code == 401 and "not known" in bad.text and "gptoss_session" not in bad.cookies
    assert sign_in(keyed, None).status_code == 401  # api_keys set: no anonymous use, as over the API


def test_a_signed_in_page_runs_as_its_caller(keyed: LiveServer) -> None:
    seen: list[QueueEvent] = []
    keyed.services.scheduler.listeners.append(seen.append)
    try:
        client = Client(keyed.url + "/", headers=session(keyed, "k1secret"), verbose=False)
        chat, _, _, info = client.predict(*CHAT, api_name="/respond")
        assert chat[-1]["role"] == "assistant" and chat[-1]["content"] and key_name("k1secret") in info
        high = Client(keyed.url + "/", headers=session(keyed, "prisecret"), verbose=False)
        high.predict(*CHAT, api_name="/respond")
        batch = high.predict("one\ntwo", None, "low", 2, "English", api_name="/batch")
        assert "2" in batch[0]
    finally:
        keyed.services.scheduler.listeners.remove(seen.append)
    finished = [(e.caller, e.priority.value) for e in seen if e.kind == "finished"]
    assert finished[0] == (key_name("k1secret"), "medium")
    assert (key_name("prisecret"), "high") in finished  # a priority key's page runs as high
    assert finished.count((key_name("prisecret"), "high")) == 3  # its batch too: the key outranks the body
    finished_ids = keyed.services.scheduler.state.finished.items()
    log_ids = [rid for rid, info in finished_ids if info["caller"] == key_name("k1secret")]
    status = httpx.get(
        keyed.url + "/v1/queue/status",
        params={"request_id": log_ids[0]},
        headers={"Authorization": "Bearer k1secret"},
        timeout=10,
    ).json()
    assert status["state"] == "finished" and status["caller"] == key_name("k1secret")


def test_operator_settings_need_an_admin_session(keyed: LiveServer) -> None:
    user = Client(keyed.url + "/", headers=session(keyed, "k1secret"), verbose=False)
    assert "admin" in user.predict(3, 50, 30, api_name="/limits")
    assert keyed.services.scheduler.config.max_queue_size != 50
    admin = Client(keyed.url + "/", headers=session(keyed, "admsecret"), verbose=False)
    assert admin.predict(3, 50, 30, api_name="/limits").startswith("applied")
    assert keyed.services.scheduler.config.max_queue_size == 50


def test_signing_out_ends_the_session(keyed: LiveServer) -> None:
    cookie = session(keyed, "k1secret")
    with httpx.Client(base_url=keyed.url, headers=cookie, timeout=10) as http:
        assert http.get("/config").status_code == 200 and http.get("/", follow_redirects=False).status_code == 200
        assert http.post("/signout", follow_redirects=False).status_code == 303
        assert http.get("/config").status_code == 401


def test_anonymous_sign_in_where_the_api_is_open(make_ui_server: Callable[..., LiveServer]) -> None:
    live = make_ui_server("server.admin_keys=[admsecret]")
    assert httpx.get(live.url + "/", follow_redirects=False, timeout=10).status_code == 303
    client = Client(live.url + "/", headers=_anonymous(live), verbose=False)
    chat, _, _, info = client.predict(*CHAT, api_name="/respond")
    assert chat[-1]["content"] and "anonymous" in info
    assert "admin" in client.predict(3, 50, 30, api_name="/limits")  # signed in, but not as an admin


def test_without_keys_the_page_is_open(make_ui_server: Callable[..., LiveServer]) -> None:
    live = make_ui_server()
    assert httpx.get(live.url + "/", timeout=10).status_code == 200
    chat, _, _, info = Client(live.url + "/", verbose=False).predict(*CHAT, api_name="/respond")
    assert chat[-1]["content"] and "anonymous" in info


def _anonymous(live: LiveServer) -> dict[str, str]:
    response = sign_in(live, None)
    assert response.status_code == 303
    return {"Cookie": f"gptoss_session={response.cookies['gptoss_session']}"}


@pytest.mark.parametrize(
    "method, path, status, allow",
    [
        ("GET", "/v1/chat/completions", 405, "POST"),
        ("PUT", "/v1/chat/completions", 405, "POST"),
        ("DELETE", "/v1/chat/completions", 405, "POST"),
        ("POST", "/v1/models", 405, "GET"),
        ("PUT", "/v1/cache", 405, "DELETE"),
        ("POST", "/v1/queue/status", 405, "GET"),
        ("GET", "/v1/nope", 404, None),
    ],
)
def test_api_paths_answer_openai_errors_with_the_page_on(
    keyed: LiveServer, method: str, path: str, status: int, allow: str | None
) -> None:
    response = httpx.request(method, keyed.url + path, headers={"Authorization": "Bearer k1secret"}, timeout=10)
    assert response.status_code == status and sorted(response.json()["error"]) == ["code", "message", "param", "type"]
    assert response.headers.get("allow") == allow


def test_the_page_grants_no_cross_origin_access_either(keyed: LiveServer) -> None:
    """Gradio alone echoes any localhost origin with credentials; our CORS policy replaces it."""
    headers = {"Origin": "http://localhost:3000", "Authorization": "Bearer k1secret"}
    for path in ("/v1/models", "/gradio_api/info", "/config"):
        response = httpx.get(keyed.url + path, headers=headers, timeout=10)
        assert "access-control-allow-origin" not in response.headers, path
        assert "access-control-allow-credentials" not in response.headers, path


TEAM = "server.keys=[{name: alice, key: sk-alice-0001, rpm: 4}, {name: ops, key: sk-ops-00001, admin: true}]"


def test_page_batch_and_api_count_against_the_same_caller(make_ui_server: Callable[..., LiveServer]) -> None:
    live = make_ui_server(TEAM)
    alice = Client(live.url + "/", headers=session(live, "sk-alice-0001"), verbose=False)
    alice.predict(*CHAT, api_name="/respond")
    alice.predict("one\ntwo", None, "low", 2, "English", api_name="/batch")
    api = httpx.post(
        live.url + "/v1/chat/completions",
        headers={"Authorization": "Bearer sk-alice-0001"},
        timeout=30,
        json={"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    )
    assert api.headers["x-ratelimit-remaining-requests"] == "0"  # page 1 + batch 2 + this one
    used = httpx.get(live.url + "/v1/usage", headers={"Authorization": "Bearer sk-alice-0001"}, timeout=10).json()
    assert used["data"][0]["requests"] == 4 and used["data"][0]["completion_tokens"] > 0
    *_, info = alice.predict(*CHAT, api_name="/respond")  # the page is held to the same limit
    assert "rate limit reached for alice" in info
    shown, *_ = alice.predict("one\ntwo", None, "English", api_name="/submit_job")  # as POST /v1/batches
    assert "rate limit reached for alice" in shown
    header, monitor, *_ = alice.predict("English", api_name="/refresh")
    assert "limits: rpm 4" in header and "5 requests in 24 h" in header
    assert "Users, last 24 hours" not in monitor  # the per-user table is for admins
    ops = Client(live.url + "/", headers=session(live, "sk-ops-00001"), verbose=False)
    _, monitor, *_ = ops.predict("English", api_name="/refresh")
    assert "Users, last 24 hours" in monitor and "| alice | 5 |" in monitor
