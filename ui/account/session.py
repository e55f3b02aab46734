"""The page's sessions: a server-side session per browser, named by an HttpOnly cookie, that every
path the page serves checks (ui.account.signin makes them)."""

from __future__ import annotations

import secrets
import time
from collections import Counter
from collections.abc import Callable

from fastapi import Request
from fastapi.responses import JSONResponse, RedirectResponse
from starlette.routing import BaseRoute, Match, Mount
from starlette.types import ASGIApp, Receive, Scope, Send

from pipeline.caller import Caller, Keyring, digest

COOKIE = "gptoss_session"
SESSION_TTL_S = 12 * 3600
_MAX_SESSIONS = 10_000


class Sessions:
    def __init__(self, keyring: Keyring, clock: Callable[[], float] = time.monotonic) -> None:
        self.keyring = keyring
        self.clock = clock
        self._open: dict[str, tuple[Caller, str | None, float]] = {}  # caller at sign-in, key digest, until

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
        self._open[token] = (
            self.keyring.caller_for(key or None),
            digest(key) if key else None,
            self.clock() + SESSION_TTL_S,
        )
        return token

    def sign_out(self, token: str | None) -> None:
        self._open.pop(token or "", None)

    def caller(self, token: str | None) -> Caller | None:
        """The signed-in caller; on an open page, anyone is anonymous."""
        entry = self._open.get(token or "")
        if entry is not None and entry[2] > self.clock():
            signed_in, key_digest, _ = entry
            if key_digest is None:
                return signed_in
            now = self.keyring.by_digest(key_digest, signed_in.cache_namespace)
            if now is None:  # the key was revoked or rotated: the session ends with it
                self._open.pop(token or "", None)
            return now
        return None if self.required else self.keyring.caller_for(None)

    def _expire(self) -> None:
        now = self.clock()
        for token in [t for t, (_, _, until) in self._open.items() if until <= now]:
            del self._open[token]
        if len(self._open) >= _MAX_SESSIONS:
            self._evict()

    def _evict(self) -> None:
        """Full: the oldest session of the key that holds the most ends, so a client signing in over
        and over with one key (or with none) ends its own sessions, not everyone else's."""
        held = Counter(key_digest for _, key_digest, _ in self._open.values())
        most = max(held, key=lambda d: held[d])
        while len(self._open) >= _MAX_SESSIONS:
            oldest = next(t for t, (_, key_digest, _) in self._open.items() if key_digest == most)
            del self._open[oldest]


class PageGuard:
    """With keys set, every path the page serves (Gradio's routes, its assets, its heartbeat and
    cancel) needs a signed-in session: the page itself goes to the sign-in form, anything else is
    401. The API's own routes pass: they check keys themselves."""

    def __init__(self, app: ASGIApp, sessions: Sessions, api_routes: Callable[[], list[BaseRoute]]) -> None:
        self.app = app
        self.sessions = sessions
        self.api_routes = api_routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] not in ("http", "websocket")
            or not self.sessions.required
            or self._api(scope)
            or self.sessions.caller(Request(scope).cookies.get(COOKIE)) is not None
        ):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http" and scope["path"] == "/" and scope["method"] in ("GET", "HEAD"):
            await RedirectResponse("/signin", status_code=303)(scope, receive, send)
        elif scope["type"] == "http":
            await JSONResponse({"detail": "sign in first"}, status_code=401)(scope, receive, send)
        else:
            await send({"type": "websocket.close", "code": 1008})

    def _api(self, scope: Scope) -> bool:
        """Only a full match: a path the API has with another method falls through to the page
        (`HEAD /openapi.json` would reach Gradio's own), so it needs a session like the page."""
        return any(
            not isinstance(route, Mount) and route.matches(scope)[0] is Match.FULL for route in self.api_routes()
        )
