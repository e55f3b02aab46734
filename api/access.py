"""Who may read what is not a model call: the API's own documents and /metrics. With keys
required, nothing but /livez, /healthz and the page's sign-in form is anonymous; a browser signed
in to the page counts as its key (the page sets `app.state.signed_in`)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response

from api.auth import identify
from api.deps import metrics_of, services_of, signed_in_of
from api.errors import APIError
from pipeline.caller import Caller

router = APIRouter(include_in_schema=False)


def viewer(request: Request) -> Caller:
    """The caller from a key, or else from the page's session cookie."""
    signed_in = signed_in_of(request)
    keyring = services_of(request).keyring
    has_key = request.headers.get("authorization") or request.query_params.get("token")
    if signed_in is not None and keyring.keys_required and not has_key:
        caller = signed_in(request)
        if caller is not None:
            return caller
    return identify(request)


@router.get("/openapi.json")
async def openapi(request: Request) -> JSONResponse:
    viewer(request)
    return JSONResponse(request.app.openapi())


@router.get("/docs")
async def docs(request: Request) -> HTMLResponse:
    viewer(request)
    token = request.query_params.get("token")
    url = "/openapi.json" + (f"?token={token}" if token and token.isascii() and token.isprintable() else "")
    return get_swagger_ui_html(openapi_url=url, title=f"{request.app.title} - API")


def check_metrics_reader(request: Request) -> None:
    """/metrics names every caller with their requests and tokens: with keys required it needs an
    admin key or one with `metrics: true`, unless `server.metrics_public` opens it on purpose."""
    services = services_of(request)
    if services.config.server.metrics_public or not services.keyring.keys_required:
        return
    caller = viewer(request)
    if not (caller.admin or caller.metrics):
        raise APIError(403, "/metrics needs an admin key or a key with metrics: true", code="metrics_key_required")


def metrics_response(request: Request) -> Response:
    check_metrics_reader(request)
    return Response(metrics_of(request).render(), media_type="text/plain; version=0.0.4; charset=utf-8")
