"""Servers with the page on, for the browser tests and the page's HTTP tests."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Callable, Iterator

import pytest

from tests.conftest import LiveServer, live_server

UI = "server.ui=true"
# 5 ms a token: a default answer (512 tokens, natural_stop off in the tests' base settings) streams
# for about 2.6 s, long enough to watch it grow and short enough to keep the module quick.
QUICK = "engine.sim.token_latency_ms=5"


def history_path() -> str:
    """A conversation file of the test's own, never the repository's data/."""
    return f"ui.history.path={tempfile.mkdtemp(prefix='history-')}/conversations.sqlite3"


def start_server(stack: contextlib.ExitStack, *overrides: str) -> LiveServer:
    """live_server(*overrides), entered inside a running event loop, with Gradio's queue analytics off
    and a conversation file of its own unless the overrides name one.

    Built outside a running loop, Gradio's safe_get_lock/safe_get_stop_event make a new event loop
    for every lock (12 per page) and never close them: ResourceWarnings, errors here, whenever the
    garbage collector finds them. And its analytics summary sets a pandas option that pandas 3
    deprecates, a DeprecationWarning (an error here) inside the server after every event."""

    if not any(o.startswith("ui.history.path=") for o in overrides):
        overrides = (history_path(), *overrides)

    async def enter() -> LiveServer:
        return stack.enter_context(live_server(*overrides))

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRADIO_ANALYTICS_CACHE_FREQUENCY", str(10**9))  # read once, when the queue is built
        try:
            asyncio.get_running_loop()  # Playwright's sync API, once started, runs one in this thread
        except RuntimeError:
            pass
        else:
            return stack.enter_context(live_server(*overrides))
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(enter())
        finally:
            loop.close()


@pytest.fixture(scope="module")
def ui_server() -> Iterator[LiveServer]:
    """The page over a quick simulator, shared by the tests that change no server setting."""
    with contextlib.ExitStack() as stack:
        yield start_server(stack, UI, QUICK)


@pytest.fixture
def make_ui_server() -> Iterator[Callable[..., LiveServer]]:
    """A page server with its own settings (the UI is always on), stopped after the test."""
    with contextlib.ExitStack() as stack:
        yield lambda *overrides: start_server(stack, UI, *overrides)
