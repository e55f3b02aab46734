"""Keys at run time: an admin makes a key (its secret once), it works at once with its class and
limits, is listed without a secret, changed, rotated (the old secret stops) and revoked (at
once); the configured keys are read-only; everything is in the audit log and survives a restart;
nobody but an admin reaches any of it."""

from __future__ import annotations

import httpx

from tests.conftest import live_server

KEYS = "server.keys=[{name: boss, key: sk-boss-00001, admin: true}, {name: alice, key: sk-alice-0001}]"
BOSS = {"Authorization": "Bearer sk-boss-00001"}
CHAT = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def test_a_key_made_at_run_time_lives_changes_rotates_and_goes(tmp_path) -> None:
    settings = (KEYS, f"usage.path={tmp_path / 'u.sqlite3'}")
    with live_server(*settings) as live, httpx.Client(base_url=live.url, timeout=10) as http:
        made = http.post("/v1/admin/keys", headers=BOSS, json={"name": "student", "class": "low", "rpm": 2})
        assert made.status_code == 200, made.text
        secret = made.json()["key"]
        assert made.json()["class"] == "low" and made.json()["limits"]["rpm"] == 2 and secret.startswith("sk-")
        assert http.post("/v1/chat/completions", headers=bearer(secret), json=CHAT).headers["x-priority"] == "low"
        listed = http.get("/v1/admin/keys", headers=BOSS).json()["data"]
        assert {(k["name"], k["source"]) for k in listed} == {
            ("boss", "config"),
            ("alice", "config"),
            ("student", "api"),
        }
        assert secret not in str(listed) and "key" not in listed[0]
        changed = http.patch("/v1/admin/keys/student", headers=BOSS, json={"rpm": 100, "class": "medium"})
        assert changed.status_code == 200 and changed.json()["limits"]["rpm"] == 100
        assert http.post("/v1/chat/completions", headers=bearer(secret), json=CHAT).status_code == 200
        rotated = http.post("/v1/admin/keys/student/rotate", headers=BOSS).json()["key"]
        assert http.post("/v1/chat/completions", headers=bearer(secret), json=CHAT).status_code == 401
        assert http.post("/v1/chat/completions", headers=bearer(rotated), json=CHAT).status_code == 200
    with live_server(*settings) as live, httpx.Client(base_url=live.url, timeout=10) as http:  # a restart keeps it
        assert http.post("/v1/chat/completions", headers=bearer(rotated), json=CHAT).status_code == 200
        assert http.delete("/v1/admin/keys/student", headers=BOSS).json()["deleted"]
        assert http.post("/v1/chat/completions", headers=bearer(rotated), json=CHAT).status_code == 401
        actions = [
            (e["actor"], e["action"], e["target"]) for e in http.get("/v1/admin/audit", headers=BOSS).json()["data"]
        ]
        assert actions == [("boss", a, "student") for a in ("revoke", "rotate", "update", "create")]


def test_only_an_admin_manages_keys_and_the_configured_ones_stay(tmp_path) -> None:
    with (
        live_server(KEYS, f"usage.path={tmp_path / 'u.sqlite3'}") as live,
        httpx.Client(base_url=live.url, timeout=10) as http,
    ):
        alice = bearer("sk-alice-0001")
        assert http.post("/v1/admin/keys", headers=alice, json={"name": "x"}).status_code == 403
        assert http.get("/v1/admin/keys").status_code == 401
        assert http.get("/v1/admin/audit", headers=alice).status_code == 403
        assert http.post("/v1/admin/keys", headers=BOSS, json={"name": "alice"}).status_code == 409
        assert http.delete("/v1/admin/keys/alice", headers=BOSS).status_code == 404
        assert http.post("/v1/chat/completions", headers=alice, json=CHAT).status_code == 200
        bad = http.post("/v1/admin/keys", headers=BOSS, json={"name": "y", "rpm": -1})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "rpm"
        odd = http.post("/v1/admin/keys", headers=BOSS, json={"name": "z", "budget": 5})
        assert odd.status_code == 400 and odd.json()["error"]["param"] == "budget"


def test_a_revoked_name_is_not_made_again_and_a_page_session_ends_with_its_key(tmp_path) -> None:
    with (
        live_server(KEYS, f"usage.path={tmp_path / 'u.sqlite3'}") as live,
        httpx.Client(base_url=live.url, timeout=10) as http,
    ):
        made = http.post("/v1/admin/keys", headers=BOSS, json={"name": "eve", "admin": True}).json()
        from ui.account.session import Sessions

        sessions = Sessions(live.services.keyring)
        token = sessions.sign_in(made["key"])
        assert sessions.caller(token).admin
        renamed = http.patch("/v1/admin/keys/eve", headers=BOSS, json={"name": "boss"})
        assert renamed.status_code == 400 and renamed.json()["error"]["param"] == "name"
        http.patch("/v1/admin/keys/eve", headers=BOSS, json={"admin": False})
        assert not sessions.caller(token).admin  # a change reaches the page session at once
        assert http.delete("/v1/admin/keys/eve", headers=BOSS).status_code == 200
        assert sessions.caller(token) is None  # and a revoke ends it
        again = http.post("/v1/admin/keys", headers=BOSS, json={"name": "eve"})
        assert again.status_code == 409  # eve's files, batches and usage stay eve's


def test_usage_windows_outside_time_are_400s() -> None:
    with live_server(KEYS) as live, httpx.Client(base_url=live.url, timeout=10) as http:
        for params in ({"end_time": "inf"}, {"start_time": 0, "end_time": 1e300}, {"start_time": 5, "end_time": 1}):
            assert http.get("/v1/usage", params=params, headers=BOSS).status_code == 400
        url = "/v1/organization/usage/completions"
        for params in (
            {"start_time": 10**19},
            {"start_time": 0, "end_time": 2**62},
            {"start_time": 0, "page": "²"},
            {"start_time": 100, "page": "0"},
        ):
            assert http.get(url, params=params, headers=BOSS).status_code == 400, params
        years = http.get(url, params={"start_time": 0, "bucket_width": "1m", "limit": 2}, headers=BOSS).json()
        assert len(years["data"]) == 2 and years["has_more"] and years["next_page"] == "120"
