"""Whose conversations a page request may see: the signed-in caller's name, or, for a caller
without a key (an open server, or "continue without a key"), the browser's own anonymous id.

That id is a random value in an HttpOnly cookie set with the page. It is the only thing that
separates anonymous users' conversations: anyone who uses that browser, or copies the cookie,
sees them. The store keeps only a digest of it, so the file does not hold the cookie itself."""

from __future__ import annotations

import hashlib
import re
import secrets

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pipeline.caller import ANONYMOUS, Caller

BROWSER_COOKIE = "gptoss_browser"
BROWSER_COOKIE_MAX_AGE_S = 400 * 24 * 3600  # the longest a browser keeps a cookie
_VALID = re.compile(r"^[A-Za-z0-9_-]{32,64}$")


def owner_of(caller: Caller, browser_id: str | None) -> str | None:
    """None: nobody to keep conversations for (an anonymous call that brought no browser id)."""
    if caller.name != ANONYMOUS:
        return f"key:{caller.name}"
    if browser_id and _VALID.match(browser_id):
        return "browser:" + hashlib.sha256(browser_id.encode()).hexdigest()[:32]
    return None


class BrowserId:
    """Sets the anonymous browser id on the page itself (GET /) when the browser has none yet,
    so every Gradio call the page then makes carries it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["path"] != "/"
            or scope["method"] != "GET"
            or _VALID.match(Request(scope).cookies.get(BROWSER_COOKIE) or "")
        ):
            await self.app(scope, receive, send)
            return
        value = secrets.token_urlsafe(32)

        async def with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 200:
                headers = MutableHeaders(scope=message)
                headers.append(
                    "set-cookie",
                    f"{BROWSER_COOKIE}={value}; Max-Age={BROWSER_COOKIE_MAX_AGE_S}; Path=/; HttpOnly; SameSite=Strict",
                )
            await send(message)

        await self.app(scope, receive, with_cookie)
