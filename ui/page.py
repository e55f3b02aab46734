"""What every part of the page shares: who is asking (each handler acts as the signed-in caller,
through the same pipeline as the HTTP API), whose conversations those are, the header, and the
Language switch's relabelling."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import gradio as gr

from conversations.store import HistoryStore
from pipeline.caller import Caller
from ui.account.owner import BROWSER_COOKIE, owner_of
from ui.account.session import COOKIE, Sessions
from ui.account.usage import usage_html
from ui.i18n import message
from wiring import Services

Labels = dict[Any, str]  # component -> i18n key, for the Language switch
Update = dict[str, Any]  # gr.update(...) or gr.skip(): a change to a component, or none


@dataclass(slots=True)
class Page:
    demo: gr.Blocks
    services: Services
    sessions: Sessions
    history: HistoryStore
    config_path: str
    header: gr.HTML
    lang: gr.Radio
    toast: gr.Markdown

    def caller_of(self, request: gr.Request | None) -> Caller:
        caller = self.sessions.caller(request.cookies.get(COOKIE)) if request is not None else None
        if caller is None:
            raise gr.Error("sign in first")
        return caller

    def owner_of(self, request: gr.Request | None) -> tuple[Caller, str | None]:
        """The caller, and the owner of its conversations (None: none are kept for it)."""
        caller = self.caller_of(request)
        return caller, owner_of(caller, request.cookies.get(BROWSER_COOKIE) if request is not None else None)

    def header_now(self, language: str, request: gr.Request) -> str:
        return header_html(self.services, self.caller_of(request), code_of(language))

    def then_header(self, event: Any) -> Any:
        """The usage line under the header counts the answer just given."""
        return event.then(self.header_now, self.lang, self.header, concurrency_limit=None, show_progress="hidden")


def header_html(services: Services, caller: Caller | None, code: str) -> str:
    """Product, served model, engine state and who is signed in (with a sign-out button)."""
    engine = services.engine
    state = message(code, "ready" if engine.ready else "loading")
    user = ""
    if caller is not None:
        user = f" · {html.escape(message(code, 'signed_in', name=caller.name))}"
        if services.keyring.any_keys:
            user += (
                f' <form method="post" action="/signout"><button id="sign-out">'
                f"{html.escape(message(code, 'sign_out'))}</button></form>"
            )
    usage = usage_html(services, caller, code) if caller is not None else ""
    return (
        f'<div><strong style="font-size:1.25em">GPT-OSS WebUI</strong> · '
        f"<code>{html.escape(engine.capabilities.model)}</code> · "
        f'<span id="engine-state">{state}</span>{user}</div>{usage}'
    )


def code_of(language: str) -> str:
    return "zh" if language == "中文" else "en"


def relabel(component: Any, key: str, code: str) -> dict:
    text = message(code, key)
    if isinstance(component, gr.UploadButton):  # its value is the file; the label is its text
        return gr.update(label=text)
    if isinstance(component, (gr.Button, gr.DownloadButton)):
        return gr.update(value=text)
    if isinstance(component, gr.Markdown):
        return gr.update(value=f"#### {text}")
    if key == "message":
        return gr.update(label=text, placeholder=message(code, "message_hint"))
    if key == "search":
        return gr.update(label=text, placeholder=message(code, "search_hint"))
    return gr.update(label=text)
