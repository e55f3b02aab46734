"""Request ids are each caller's own, over real HTTP on the simulator: another caller's id is
`unknown` in the queue status, exactly as one never sent, and two callers may use the same id at
once; only a caller's own id still in progress is refused. An admin names whose request it means."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.api.test_bad_input import assert_error
from tests.conftest import LiveServer, live_server

KEYS = (
    "server.keys=[{name: alice, key: sk-alice-0001}, {name: bob, key: sk-bob-00001},"
    " {name: ops, key: sk-ops-00001, admin: true}]"
)
ALICE, BOB, OPS = "sk-alice-0001", "sk-bob-00001", "sk-ops-00001"
CHAT = "/v1/chat/completions"
HOLD = {
    "model": "sim",
    "messages": [{"role": "user", "content": "Hold this slot."}],
    "max_tokens": 300,
    "stream": True,
    "temperature": 0,
}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def ask(
    live: LiveServer,
    key: str,
    request_id: str | None = None,
    headers: dict[str, str] | None = None,
    max_tokens: int = 3,
) -> httpx.Response:
    body = {"model": "sim", "messages": [{"role": "user", "content": "hello"}], "max_tokens": max_tokens}
    if request_id is not None:
        body["request_id"] = request_id
    return httpx.post(live.url + CHAT, json=body, headers={**auth(key), **(headers or {})}, timeout=30)


def status(live: LiveServer, key: str, request_id: str, **params: str) -> httpx.Response:
    return httpx.get(
        live.url + "/v1/queue/status", params={"request_id": request_id, **params}, headers=auth(key), timeout=10
    )


def state(live: LiveServer, key: str, request_id: str) -> str:
    return status(live, key, request_id).json()["state"]


def wait_state(live: LiveServer, key: str, request_id: str, wanted: str) -> None:
    deadline = time.monotonic() + 10
    while (now := state(live, key, request_id)) != wanted:
        assert time.monotonic() < deadline, f"{request_id} never became {wanted}; last: {now}"
        time.sleep(0.02)


def unknown(request_id: str) -> dict:
    return {"request_id": request_id, "state": "unknown"}


@pytest.fixture
def team() -> Iterator[LiveServer]:
    with live_server(KEYS, "scheduler.max_concurrency=2", "engine.sim.token_latency_ms=20") as live:
        live.status_key = OPS
        yield live


@pytest.fixture
def one_slot() -> Iterator[LiveServer]:
    with live_server(KEYS, "scheduler.max_concurrency=1", "engine.sim.token_latency_ms=20") as live:
        live.status_key = OPS
        yield live


def test_a_running_id_is_unknown_to_another_caller_who_may_use_it_too(team: LiveServer) -> None:
    with httpx.stream(
        "POST", team.url + CHAT, json={**HOLD, "request_id": "job-1"}, headers=auth(ALICE), timeout=30
    ) as held:
        assert held.status_code == 200
        mine = status(team, ALICE, "job-1").json()
        assert (mine["request_id"], mine["state"], mine["caller"]) == ("job-1", "running", "alice")
        assert status(team, BOB, "job-1").json() == unknown("job-1")
        assert status(team, BOB, "never-sent").json() == unknown("never-sent")
        reused = ask(team, BOB, "job-1")
        assert reused.status_code == 200, reused.text
        assert reused.json()["id"] == "job-1" and reused.headers["x-request-id"] == "job-1"
        assert reused.json()["usage"]["completion_tokens"] == 3
        by_header = ask(team, BOB, headers={"X-Request-ID": "job-1"})
        assert by_header.status_code == 200 and by_header.headers["x-request-id"] == "job-1"
        assert state(team, ALICE, "job-1") == "running"  # bob's finished request did not touch hers
        again = ask(team, ALICE, "job-1")
        assert_error(again, 400, param="request_id", code="duplicate_request_id", names="'job-1'")


def test_an_admin_names_whose_request_it_means(team: LiveServer) -> None:
    with httpx.stream(
        "POST", team.url + CHAT, json={**HOLD, "request_id": "job-1"}, headers=auth(ALICE), timeout=30
    ) as held:
        assert held.status_code == 200
        assert status(team, OPS, "job-1").json() == unknown("job-1")  # an admin's own ids are its own too
        seen = status(team, OPS, "job-1", caller="alice").json()
        assert (seen["request_id"], seen["state"], seen["caller"]) == ("job-1", "running", "alice")
        assert status(team, ALICE, "job-1", caller="alice").json()["state"] == "running"  # naming oneself
        refused = status(team, BOB, "job-1", caller="alice")
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "admin_key_required"
        assert refused.json()["error"]["param"] == "caller" and "job-1" not in refused.text


def test_a_queued_id_is_unknown_to_another_caller_and_both_run(one_slot: LiveServer) -> None:
    answers: dict[str, httpx.Response] = {}
    with httpx.stream(
        "POST", one_slot.url + CHAT, json={**HOLD, "request_id": "holder"}, headers=auth(ALICE), timeout=30
    ) as held:
        assert held.status_code == 200
        waiters = [
            threading.Thread(target=lambda k=key, n=name: answers.__setitem__(n, ask(one_slot, k, "job-2")))
            for key, name in ((ALICE, "alice"), (BOB, "bob"))
        ]
        waiters[0].start()
        wait_state(one_slot, ALICE, "job-2", "queued")
        assert status(one_slot, BOB, "job-2").json() == unknown("job-2")
        assert status(one_slot, BOB, "holder").json() == unknown("holder")
        waiters[1].start()
        wait_state(one_slot, BOB, "job-2", "queued")
        queued = status(one_slot, ALICE, "job-2").json()
        theirs = status(one_slot, BOB, "job-2").json()
        assert (queued["request_id"], queued["caller"], theirs["caller"]) == ("job-2", "alice", "bob")
        assert sorted([queued["position"], theirs["position"]]) == [1, 2]  # fair share picks the order
        assert_error(ask(one_slot, ALICE, "job-2"), 400, param="request_id", code="duplicate_request_id")
    for waiter in waiters:
        waiter.join(timeout=30)
    for name in ("alice", "bob"):
        assert answers[name].status_code == 200 and answers[name].json()["id"] == "job-2", answers[name].text


def test_a_finished_request_is_visible_only_to_its_owner(team: LiveServer) -> None:
    assert ask(team, ALICE, "job-3").status_code == 200
    finished = status(team, ALICE, "job-3").json()
    assert (finished["request_id"], finished["state"], finished["caller"], finished["outcome"]) == (
        "job-3",
        "finished",
        "alice",
        "finish",
    )
    assert status(team, BOB, "job-3").json() == unknown("job-3")
    assert ask(team, BOB, "job-3").status_code == 200  # a finished id is free, and bob's is his own anyway
    assert status(team, ALICE, "job-3").json()["caller"] == "alice"
    assert status(team, BOB, "job-3").json()["caller"] == "bob"
