"""Signing in to the page with the same keys the API takes: a server-side session per browser,
named by an HttpOnly cookie, that every Gradio endpoint checks."""

from __future__ import annotations

import html
import secrets
import time
from typing import Callable
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from pipeline.caller import Caller, Keyring

COOKIE = "gptoss_session"
SESSION_TTL_S = 12 * 3600
_MAX_SESSIONS = 10_000


class Sessions:
    def __init__(self, keyring: Keyring, clock: Callable[[], float] = time.monotonic) -> None:
        self.keyring = keyring
        self.clock = clock
        self._open: dict[str, tuple[Caller, float]] = {}

    @property
    def required(self) -> bool:
        """With any key configured the page asks who you are; without, it is open to all."""
        return self.keyring.any_keys

    def sign_in(self, key: str | None) -> str | None:
        """A session token for a known key, or for no key where the API is open too; else None."""
        if key:
            if not self.keyring.is_known(key):
                return None
        elif self.keyring.keys_required:
            return None
        self._expire()
        token = secrets.token_urlsafe(32)
        self._open[token] = (self.keyring.caller_for(key or None), self.clock() + SESSION_TTL_S)
        return token

    def sign_out(self, token: str | None) -> None:
        self._open.pop(token or "", None)

    def caller(self, token: str | None) -> Caller | None:
        """The signed-in caller; on an open page, anyone is anonymous."""
        entry = self._open.get(token or "")
        if entry is not None and entry[1] > self.clock():
            return entry[0]
        return None if self.required else self.keyring.caller_for(None)

    def _expire(self) -> None:
        now = self.clock()
        for token in [t for t, (_, until) in self._open.items() if until <= now]:
            del self._open[token]
        while len(self._open) >= _MAX_SESSIONS:
            self._open.pop(next(iter(self._open)))


class SignInFirst:
    """The page itself without a session goes to the sign-in form (Gradio's own endpoints answer
    401 through its auth dependency)."""

    def __init__(self, app: ASGIApp, sessions: Sessions) -> None:
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/" and self.sessions.required:
            if self.sessions.caller(Request(scope).cookies.get(COOKIE)) is None:
                await RedirectResponse("/signin", status_code=303)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def add_sign_in(app: FastAPI, sessions: Sessions) -> None:
    @app.get("/signin", include_in_schema=False)
    async def sign_in_form() -> HTMLResponse:
        return HTMLResponse(_form(sessions, ""))

    @app.post("/signin", include_in_schema=False)
    async def sign_in(request: Request) -> Response:
        fields = parse_qs((await request.body()).decode("utf-8", "replace"))
        key = "" if fields.get("anonymous") else (fields.get("key") or [""])[0].strip()
        token = sessions.sign_in(key or None)
        if token is None:
            return HTMLResponse(_form(sessions, "That key is not known here."), status_code=401)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, token, max_age=SESSION_TTL_S, httponly=True, samesite="strict")
        return response

    @app.post("/signout", include_in_schema=False)
    async def sign_out(request: Request) -> Response:
        sessions.sign_out(request.cookies.get(COOKIE))
        response = RedirectResponse("/signin", status_code=303)
        response.delete_cookie(COOKIE)
        return response

    app.add_middleware(SignInFirst, sessions=sessions)


def _form(sessions: Sessions, problem: str) -> str:
    anonymous = "" if sessions.keyring.keys_required else (
        '<button name="anonymous" value="1" type="submit" class="plain" id="anonymous">Continue without a key</button>')
    note = f'<p class="problem">{html.escape(problem)}</p>' if problem else ""
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Sign in · GPT-OSS WebUI</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font-family:system-ui,sans-serif;background:#f6f7f9;display:grid;place-items:center;height:100vh;margin:0}}
form{{background:#fff;padding:28px 32px;border-radius:10px;box-shadow:0 2px 12px rgba(0,0,0,.1);width:340px}}
h1{{font-size:20px;margin:0 0 4px}} p{{color:#555;font-size:14px}} .problem{{color:#b00020}}
input{{width:100%;box-sizing:border-box;padding:9px;margin:8px 0 14px;border:1px solid #ccc;border-radius:6px}}
button{{padding:9px 16px;border:0;border-radius:6px;background:#f97316;color:#fff;font-weight:600;cursor:pointer}}
button.plain{{background:none;color:#444;text-decoration:underline;font-weight:400}}</style></head>
<body><form method="post" action="/signin"><h1>GPT-OSS WebUI</h1><p>Sign in with your API key.</p>{note}
<label for="key">API key</label><input id="key" name="key" type="password" autocomplete="current-password" autofocus>
<button type="submit" id="sign-in">Sign in</button> {anonymous}</form></body></html>"""
