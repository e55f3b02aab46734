"""The page's conversation history over Gradio's own HTTP endpoints and gradio_client, without a
browser: one caller's conversations are nowhere in another's answers, even when the other takes
over its Gradio session; nothing is served without a session where keys are set; on an open
server each browser (its anonymous id cookie) has its own."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from gradio_client import Client

from tests.conftest import LiveServer
from tests.ui.conftest import UI, start_server
from tests.ui.test_page_keys import session
from ui.account.owner import BROWSER_COOKIE

TEAM = "server.keys=[{name: alice, key: sk-alice-0001}, {name: bob, key: sk-bob-000001}]"
SECRET = "alice's secret recipe for plum jam"


def chat(text: str) -> list:
    # respond(text, chat, system, priority, max_tokens, temperature, top_p, reasoning, timeout, language)
    return [text, [], "be a chef", "medium", 8, 0, 1, "medium", 300, "English"]


@pytest.fixture(scope="module")
def team() -> Iterator[LiveServer]:
    with contextlib.ExitStack() as stack:
        yield start_server(stack, UI, TEAM)


def call(live: LiveServer, headers: dict[str, str], api_name: str, data: list) -> list:
    """Gradio's /gradio_api/call protocol by hand: the raw outputs, updates and all."""
    with httpx.Client(base_url=live.url, headers=headers, timeout=30) as http:
        posted = http.post(f"/gradio_api/call/{api_name}", json={"data": data})
        assert posted.status_code == 200, posted.text
        answer = http.get(f"/gradio_api/call/{api_name}/{posted.json()['event_id']}").text
    event, payload = None, None
    for line in answer.splitlines():
        if line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif line.startswith("data: ") and event in ("complete", "error"):
            payload = line.removeprefix("data: ")
    assert event == "complete", answer
    return json.loads(payload)


def text(message: dict) -> str:
    """gradio_client hands a message's content as a list of parts."""
    content = message["content"]
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


def listed(live: LiveServer, headers: dict[str, str], query: str = "") -> list[tuple[str, str]]:
    """The sidebar's (title, id) choices as the page receives them."""
    update = call(live, headers, "history_list", [query])[0]
    return [tuple(choice) for choice in update["choices"]]


def test_another_caller_can_neither_list_open_rename_export_nor_delete(team: LiveServer, tmp_path) -> None:
    alice_cookie, bob_cookie = session(team, "sk-alice-0001"), session(team, "sk-bob-000001")
    alice = Client(team.url + "/", headers=alice_cookie, verbose=False, download_files=str(tmp_path))
    alice.predict(*chat(SECRET), api_name="/respond")
    ((title, cid),) = listed(team, alice_cookie)
    assert title == SECRET and listed(team, alice_cookie, "plum") == [(title, cid)]
    assert listed(team, bob_cookie) == [] and listed(team, bob_cookie, "plum") == []

    bob = Client(team.url + "/", headers=bob_cookie, verbose=False, download_files=str(tmp_path))
    with pytest.raises(Exception) as refused:  # not among bob's choices: Gradio refuses it before we see it
        bob.predict(cid, "English", api_name="/history_open")
    assert SECRET not in str(refused.value)
    # Bob takes over alice's Gradio session (its hash is all that names it): her open conversation
    # is in that session's state now, yet every handler asks the store as bob.
    alice.predict("", api_name="/history_list")  # as the page does on load: her session's choices
    opened, *_ = alice.predict(cid, "English", api_name="/history_open")
    assert [text(m) for m in opened if m["role"] == "user"] == [SECRET]
    bob.session_hash = alice.session_hash
    exported, note = bob.predict("JSON", "English", api_name="/history_export")
    assert exported == {"visible": False, "__type__": "update"} and "Nothing to export" in note  # no file
    _, note = bob.predict("stolen", "", "English", api_name="/history_rename")
    assert "not there" in note
    *_, note = bob.predict("", "English", api_name="/history_delete")
    assert "not there" in note
    everything, _ = bob.predict("Markdown", "English", api_name="/history_export_all")
    assert everything == {"visible": False, "__type__": "update"}
    bob_chat, *_ = bob.predict(*chat("bob's own question"), api_name="/respond")  # goes to a new one of his
    assert [text(m) for m in bob_chat if m["role"] == "user"] == ["bob's own question"]

    assert listed(team, alice_cookie) == [(SECRET, cid)]
    assert [t for t, _ in listed(team, bob_cookie)] == ["bob's own question"]
    mine, note = alice.predict("JSON", "English", api_name="/history_export_all")
    mine = mine["value"]  # an update that shows the file: gradio_client has downloaded it
    body = json.loads(Path(mine).read_text(encoding="utf-8"))
    assert [c["title"] for c in body["conversations"]] == [SECRET]
    assert body["conversations"][0]["settings"]["system_prompt"] == "be a chef"
    messages = body["conversations"][0]["messages"]
    assert [(m["role"], m["outcome"]) for m in messages] == [("user", ""), ("assistant", "done")]
    assert messages[0]["content"] == SECRET and messages[1]["content"] and messages[1]["details"]["caller"] == "alice"
    assert "bob" not in json.dumps(body)


def test_without_a_session_nothing_is_served(team: LiveServer) -> None:
    with httpx.Client(base_url=team.url, timeout=10) as http:
        for name in ("history_list", "history_open", "history_export_all", "history_delete", "history_rename"):
            assert http.post(f"/gradio_api/call/{name}", json={"data": [""]}).status_code == 401
        assert BROWSER_COOKIE not in http.get("/", follow_redirects=False).cookies  # the sign-in form, no id


def test_on_an_open_server_each_browser_has_its_own(make_ui_server) -> None:
    live = make_ui_server()
    first = httpx.get(live.url + "/", timeout=10).cookies[BROWSER_COOKIE]
    second = httpx.get(live.url + "/", timeout=10).cookies[BROWSER_COOKIE]
    assert first != second and len(first) >= 32
    one = {"Cookie": f"{BROWSER_COOKIE}={first}"}
    Client(live.url + "/", headers=one, verbose=False).predict(*chat("first browser's note"), api_name="/respond")
    assert [t for t, _ in listed(live, one)] == ["first browser's note"]
    assert listed(live, {"Cookie": f"{BROWSER_COOKIE}={second}"}) == []
    assert listed(live, {}) == []  # no browser id: nothing is kept, nothing is listed
    Client(live.url + "/", verbose=False).predict(*chat("from nowhere"), api_name="/respond")
    assert [t for t, _ in listed(live, one)] == ["first browser's note"]
    with httpx.Client(base_url=live.url, headers=one, timeout=10) as http:  # a browser keeps the id it has
        assert BROWSER_COOKIE not in http.get("/").cookies
