"""Signing in to the page with the same keys the API takes. The form refuses a post from another
site (login CSRF: a page elsewhere signing this browser in with the attacker's key, so the victim's
chats land in the attacker's history) by its `Origin` (or `Referer`, or `Sec-Fetch-Site`)."""

from __future__ import annotations

import html
from urllib.parse import parse_qs, urlsplit

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from settings.schema import ServerConfig
from ui.account.session import COOKIE, SESSION_TTL_S, Sessions


def add_sign_in(app: FastAPI, sessions: Sessions, server: ServerConfig) -> None:
    @app.get("/signin", include_in_schema=False)
    async def sign_in_form() -> HTMLResponse:
        return HTMLResponse(_form(sessions, ""))

    @app.post("/signin", include_in_schema=False)
    async def sign_in(request: Request) -> Response:
        if not same_site(request, server):
            return HTMLResponse(_form(sessions, "Sign in from this server's own page."), status_code=403)
        fields = parse_qs((await request.body()).decode("utf-8", "replace"))
        key = "" if fields.get("anonymous") else (fields.get("key") or [""])[0].strip()
        token = sessions.sign_in(key or None)
        if token is None:
            return HTMLResponse(_form(sessions, "That key is not known here."), status_code=401)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            COOKIE, token, max_age=SESSION_TTL_S, httponly=True, samesite="lax", secure=is_https(request, server)
        )
        return response

    @app.post("/signout", include_in_schema=False)
    async def sign_out(request: Request) -> Response:
        if not same_site(request, server):
            return HTMLResponse(_form(sessions, "Sign out from this server's own page."), status_code=403)
        sessions.sign_out(request.cookies.get(COOKIE))
        response = RedirectResponse("/signin", status_code=303)
        response.delete_cookie(COOKIE, httponly=True, samesite="lax", secure=is_https(request, server))
        return response


def same_site(request: Request, server: ServerConfig) -> bool:
    """A browser names the page a form was posted from; it must be this server (the host the
    request came to, or `server.public_url`). A post naming none comes from a script, which could
    send any key it has anyway."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        return False
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source or source == "null":
        return source is None
    return _origin(source) in {_origin(server.public_url), _host_origin(request)} - {None}


def is_https(request: Request, server: ServerConfig) -> bool:
    """Behind a proxy that ends TLS the request arrives as http: `public_url`, or the proxy's
    `X-Forwarded-Proto` (which uvicorn applies where `server.forwarded_proto` trusts it), says the
    browser used https."""
    return request.url.scheme == "https" or server.public_url.lower().startswith("https://")


def _origin(url: str) -> str | None:
    parts = urlsplit(url.strip())
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


def _host_origin(request: Request) -> str | None:
    host = request.headers.get("host")
    if not host:
        return None
    return f"{request.url.scheme}://{host.lower()}"


def _form(sessions: Sessions, problem: str) -> str:
    anonymous = (
        ""
        if sessions.keyring.keys_required
        else (
            '<button name="anonymous" value="1" type="submit" class="plain" id="anonymous">Continue without a key</button>'
        )
    )
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
