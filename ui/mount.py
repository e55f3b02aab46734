"""The Gradio page at /, behind the same keys as the API when any are configured."""

from __future__ import annotations

from typing import Callable

import gradio as gr
from fastapi import FastAPI, Request

from ui.blocks import CSS, I18N, build_ui
from ui.session import COOKIE, Sessions, add_sign_in
from wiring import Services


def mount_ui(app: FastAPI, services: Services, config_path: str) -> None:
    sessions = Sessions(services.keyring)
    if sessions.required:
        add_sign_in(app, sessions)
    gr.mount_gradio_app(app, build_ui(services, sessions, config_path), path="/", i18n=I18N,
                        footer_links=["settings"], css=CSS,
                        auth_dependency=_signed_in(sessions) if sessions.required else None)


def _signed_in(sessions: Sessions) -> Callable[[Request], str | None]:
    """Gradio asks this on every route it serves: None means 401."""

    def caller_name(request: Request) -> str | None:
        caller = sessions.caller(request.cookies.get(COOKIE))
        return caller.name if caller is not None else None

    return caller_name
