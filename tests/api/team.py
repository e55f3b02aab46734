"""A team's keys and a server on the simulator, plain and harmony, for the tests of each wire."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import LiveServer, live_server

KEYS = (
    "server.keys=[{name: alice, key: sk-alice-0001, rpm: 100}, {name: bob, key: sk-bob-00001},"
    " {name: ops, key: sk-ops-00001, admin: true}, {name: slow, key: sk-slow-0001, rpm: 1}]"
)


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "harmony"])
def live(request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    with live_server(
        KEYS, f"engine.sim.harmony={str(request.param).lower()}", "engine.sim.natural_stop=true"
    ) as server:
        server.status_key = "sk-ops-00001"
        yield server
