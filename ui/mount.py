"""The Gradio page at /, behind the same keys as the API when any are configured, with its
conversation history opened and closed with the server."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

import gradio as gr
from fastapi import FastAPI, Request

from conversations.store import HistoryStore
from ui.account.owner import BrowserId
from ui.account.session import COOKIE, PageGuard, Sessions
from ui.account.signin import add_sign_in
from ui.account.uploads import UploadGuard, Uploads
from ui.blocks import CSS, I18N, build_ui
from wiring import Services


def mount_ui(app: FastAPI, services: Services, config_path: str) -> None:
    sessions = Sessions(services.keyring)
    history = HistoryStore(services.config.ui.history)
    app.state.history = history
    app.state.signed_in = lambda request: sessions.caller(request.cookies.get(COOKIE))
    if sessions.required:
        add_sign_in(app, sessions, services.config.server)
    uploads = Uploads(services.config.ui.max_upload_store_bytes)
    app.add_middleware(UploadGuard, uploads=uploads, max_body_bytes=services.config.server.max_body_bytes)
    app.add_middleware(PageGuard, sessions=sessions, api_routes=lambda: app.routes)
    app.add_middleware(BrowserId)
    blocks = build_ui(services, sessions, config_path, history)
    gr.mount_gradio_app(
        app,
        blocks,
        path="/",
        i18n=I18N,
        footer_links=["settings"],
        css=CSS,
        max_file_size=services.config.ui.max_upload_bytes,
        show_error=False,  # gr.Error only
        auth_dependency=_signed_in(sessions) if sessions.required else None,
    )
    blocks.has_launched = True  # so Gradio's own checks on file paths apply too (it skips them before launch)
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

    app.router.lifespan_context = lifespan  # type: ignore[assignment]  # yields the inner lifespan's state as is


def _signed_in(sessions: Sessions) -> Callable[[Request], str | None]:
    """Gradio asks this on every route it serves: None means 401."""

    def caller_name(request: Request) -> str | None:
        caller = sessions.caller(request.cookies.get(COOKIE))
        return caller.name if caller is not None else None

    return caller_name
