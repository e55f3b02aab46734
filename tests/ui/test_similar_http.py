"""The page's "ask the model instead" over Gradio's own HTTP endpoints: a similar question's answer
is marked, the button reports the pairing (as POST /v1/cache/feedback does) and the model answers;
another caller, even one that takes over the Gradio session, reports nothing of anyone else's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from gradio_client import Client

from tests.conftest import LiveServer
from tests.ui.conftest import UI, start_server
from tests.ui.test_history_http import TEAM
from tests.ui.test_page_keys import session

QUESTION = "How do I sort a list of numbers by their absolute value in Python?"
PARAPHRASE = "in python,   how do i sort a list of numbers by their absolute valeu"
SETTINGS = ["be brief", "medium", 8, 0, 1, "medium", 300, "English"]  # system .. timeout, language; temperature 0


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    path = tmp_path_factory.mktemp("similar-page") / "cache.sqlite3"
    with contextlib.ExitStack() as stack:
        yield start_server(
            stack,
            UI,
            TEAM,
            "cache.enabled=true",
            f"cache.path={path}",
            "cache.similar.enabled=true",
            "cache.namespace_by_key=true",
        )


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One cache for every key (cache.namespace_by_key off): the request keys alone do not tell
    alice's similar answer from bob's."""
    path = tmp_path_factory.mktemp("similar-shared") / "cache.sqlite3"
    with contextlib.ExitStack() as stack:
        shared_cache = (
            "cache.enabled=true",
            f"cache.path={path}",
            "cache.similar.enabled=true",
            "cache.namespace_by_key=false",
        )
        yield start_server(stack, UI, TEAM, *shared_cache)


def respond(client: Client, text: str) -> tuple[list, str]:
    """A new chat with one question: the chat and the line under its answer."""
    chat, _, _, info, *_ = client.predict(text, [], *SETTINGS, api_name="/respond")
    return chat, info


def ask_model(client: Client, chat: list) -> tuple[list, str]:
    chat, _, info, *_ = client.predict(chat, *SETTINGS, api_name="/ask_model")
    return chat, info


def false_reports(live: LiveServer) -> int:
    return live.services.cache.similar.false_hits


def served_pairings(live: LiveServer) -> list:
    """Every similar answer's pairing this server served lately."""
    return list(live.services.cache.similar._served.values())


def test_ask_the_model_instead_reports_only_the_callers_own_similar_answer(team: LiveServer, tmp_path) -> None:
    alice_cookie, bob_cookie = session(team, "sk-alice-0001"), session(team, "sk-bob-000001")
    alice = Client(team.url + "/", headers=alice_cookie, verbose=False, download_files=str(tmp_path))
    first, info = respond(alice, QUESTION)
    assert "similar" not in info
    similar_chat, info = respond(alice, PARAPHRASE)
    assert "a similar question's answer (similarity 0." in info
    assert similar_chat[-1]["content"] == first[-1]["content"]

    bob = Client(team.url + "/", headers=bob_cookie, verbose=False, download_files=str(tmp_path))
    bob.session_hash = alice.session_hash  # her session's state holds the id her similar answer went out as
    before = false_reports(team)
    ask_model(bob, similar_chat)
    assert false_reports(team) == before  # bob's key is not the key the pairing answered
    assert "similarity" in respond(alice, PARAPHRASE)[1]  # so alice still gets it

    generated = team.services.engine.stats().generated_tokens
    fresh, info = ask_model(alice, similar_chat)
    assert false_reports(team) == before + 1
    assert "similar" not in info and team.services.engine.stats().generated_tokens > generated
    assert [m["role"] for m in fresh] == ["user", "assistant"]  # the similar answer was replaced
    assert "similar" not in respond(alice, PARAPHRASE)[1]  # that pairing is never served again


def test_a_shared_cache_still_lets_only_whom_it_was_served_to_report_it(shared: LiveServer, tmp_path) -> None:
    alice_cookie, bob_cookie = session(shared, "sk-alice-0001"), session(shared, "sk-bob-000001")
    alice = Client(shared.url + "/", headers=alice_cookie, verbose=False, download_files=str(tmp_path))
    respond(alice, QUESTION)
    similar_chat, info = respond(alice, PARAPHRASE)
    assert "a similar question's answer (similarity 0." in info

    bob = Client(shared.url + "/", headers=bob_cookie, verbose=False, download_files=str(tmp_path))
    bob.session_hash = alice.session_hash  # the same request key as hers, and her session's state
    before = false_reports(shared)
    _, info = ask_model(bob, similar_chat)
    assert "similar" not in info  # bob still gets the model's answer he asked for ...
    assert false_reports(shared) == before  # ... but reports nothing: her answer was not served to him
    assert not any(shared.services.cache.similar.is_blocked(p) for p in served_pairings(shared))
    # (bob's own answer, from the model, is now the paraphrase's exact entry in this shared cache)

    bob = Client(shared.url + "/", headers=bob_cookie, verbose=False, download_files=str(tmp_path))
    similar_chat, info = respond(bob, QUESTION + " Please.")  # served to bob himself: his to report
    assert "similarity" in info
    ask_model(bob, similar_chat)
    assert false_reports(shared) == before + 1
