"""The page's sessions, bounded: a client signing in over and over ends its own oldest sessions,
never another key's."""

from __future__ import annotations

import pytest

import ui.account.session as session_module
from pipeline.caller import Keyring
from settings.loader import load_config
from ui.account.session import Sessions


@pytest.mark.parametrize(
    "keys, flooder",
    [
        ("server.api_keys=[sk-alice-0001,sk-mallory-01]", "sk-mallory-01"),
        ("scheduler.priority_keys=[sk-alice-0001]", None),  # keys, yet open: "Continue without a key"
    ],
)
def test_a_flood_of_sign_ins_ends_only_the_flooders_own_sessions(monkeypatch, keys: str, flooder: str | None) -> None:
    monkeypatch.setattr(session_module, "_MAX_SESSIONS", 5)
    keyring = Keyring(load_config(None, overrides=[keys]))
    sessions = Sessions(keyring)
    alice = sessions.sign_in("sk-alice-0001")
    flood = [sessions.sign_in(flooder) for _ in range(20)]
    assert alice is not None and all(flood)
    assert sessions.caller(alice) == keyring.caller_for("sk-alice-0001")
    assert [sessions.caller(t) is not None for t in flood] == [False] * 16 + [True] * 4
