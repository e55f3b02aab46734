"""The Gradio page at /, behind the same keys as the API when any are configured, with its
conversation history opened and closed with the server."""

from __future__ import annotations

import contextlib
from typing import AsyncIterator, Callable

import gradio as gr
from fastapi import FastAPI, Request

from ui.blocks import CSS, I18N, build_ui
from ui.history_store import HistoryStore
from ui.owner import BrowserId
from ui.session import COOKIE, Sessions, add_sign_in
from wiring import Services


def mount_ui(app: FastAPI, services: Services, config_path: str) -> None:
    sessions = Sessions(services.keyring)
    history = HistoryStore(services.config.ui.history)
    app.state.history = history
    if sessions.required:
        add_sign_in(app, sessions)
    app.add_middleware(BrowserId)
    gr.mount_gradio_app(app, build_ui(services, sessions, config_path, history), path="/", i18n=I18N,
                        footer_links=["settings"], css=CSS,
                        auth_dependency=_signed_in(sessions) if sessions.required else None)
    _open_with_the_server(app, history)


def _open_with_the_server(app: FastAPI, history: HistoryStore) -> None:
    """Opened before the server answers and closed after the rest has stopped, so the answers
    still being written when it stops are written whole."""
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(application: FastAPI) -> AsyncIterator[object]:
        await history.open()
        try:
            async with inner(application) as state:
                yield state
        finally:
            await history.close()

    app.router.lifespan_context = lifespan


def _signed_in(sessions: Sessions) -> Callable[[Request], str | None]:
    """Gradio asks this on every route it serves: None means 401."""

    def caller_name(request: Request) -> str | None:
        caller = sessions.caller(request.cookies.get(COOKIE))
        return caller.name if caller is not None else None

    return caller_name
