"""Routes other than chat: models, queue status, health."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.routing import Match

from api.access import metrics_response
from api.auth import identify
from api.cache_feedback import cache_feedback
from api.chat import create_chat_completion
from api.completions import create_completion
from api.deps import batch_runner_of, services_of
from api.errors import APIError
from api.tokenize import tokenize
from batches.store import BatchStore
from pipeline import usage_buckets as buckets
from pipeline.accounts import accounts
from pipeline.caller import ANONYMOUS, Caller
from pipeline.usage import RETENTION_S
from pipeline.usage_file import usage_rows
from scheduler.request import RequestKey
from scheduler.snapshot import snapshot
from scheduler.status import overall_status, request_status

router = APIRouter()
router.add_api_route("/v1/chat/completions", create_chat_completion, methods=["POST"])
router.add_api_route("/v1/completions", create_completion, methods=["POST"])
router.add_api_route("/tokenize", tokenize, methods=["POST"])
router.add_api_route("/v1/cache/feedback", cache_feedback, methods=["POST"])

_STARTED = int(time.time())


@router.get("/v1/models")
async def list_models(request: Request) -> dict:
    """OpenAI's list; Anthropic's shape where the request carries `anthropic-version`, as its SDKs do."""
    services = services_of(request)
    identify(request)
    caps = services.engine.capabilities
    if "anthropic-version" in request.headers:
        created = datetime.fromtimestamp(_STARTED, UTC).isoformat().replace("+00:00", "Z")
        model = {
            "type": "model",
            "id": caps.model,
            "display_name": caps.model,
            "created_at": created,
            "max_input_tokens": caps.max_model_len,
            "max_tokens": caps.max_model_len,
        }
        return {"data": [model], "has_more": False, "first_id": caps.model, "last_id": caps.model}
    return {
        "object": "list",
        "data": [
            {
                "id": caps.model,
                "object": "model",
                "created": _STARTED,
                "owned_by": "gpt-oss-webui",
                "max_model_len": caps.max_model_len,
            }
        ],
    }


@router.get("/v1/queue/status")
async def queue_status(request: Request, request_id: str | None = None, caller: str | None = None) -> dict:
    """The queue, or one request of the caller's own: ids are each caller's, so another caller's is
    `unknown`. An admin may name whose request with `caller`."""
    services = services_of(request)
    viewer = identify(request)
    if caller is not None and caller != viewer.name and not viewer.admin:
        raise APIError(
            403, "looking up another caller's request needs an admin key", param="caller", code="admin_key_required"
        )
    if request_id is not None:
        return request_status(services.scheduler, RequestKey(caller or viewer.name, request_id))
    runner = batch_runner_of(request)
    return {
        **overall_status(snapshot(services.scheduler)),
        "batch_lines_running": runner.lines_running,
        "batches": await _batches_of(services.batches, runner.running_of(caller or viewer.name)),
    }


async def _batches_of(store: BatchStore, running: dict[str, int]) -> list[dict]:
    """The viewer's own unfinished batches: lines in the engine and lines still to run."""
    return [
        {"id": batch_id, "lines_running": n, "lines_pending": (await store.counts(batch_id)).get("pending", 0)}
        for batch_id, n in running.items()
    ]


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return metrics_response(request)


@router.get("/livez")
async def livez() -> dict:
    """Liveness: the process and its event loop answer. Readiness is /healthz."""
    return {"status": "alive"}


@router.get("/healthz")
async def healthz(request: Request) -> JSONResponse:
    if services_of(request).engine.ready:
        return JSONResponse({"status": "ok"})
    return JSONResponse({"status": "loading", "message": "the engine is loading the model"}, status_code=503)


@router.get("/v1/cache/stats")
async def cache_stats(request: Request) -> dict:
    services = services_of(request)
    identify(request)
    if services.cache is None:
        return {"object": "cache.stats", "enabled": False}
    return services.cache.stats()


@router.delete("/v1/cache")
async def clear_cache(request: Request) -> dict:
    services = services_of(request)
    _require_admin(identify(request), "clearing the cache")
    removed = await services.cache.clear() if services.cache is not None else 0
    return {"object": "cache.cleared", "removed": removed}


@router.get("/v1/usage")
async def usage(
    request: Request, start_time: float | None = None, end_time: float | None = None, caller: str | None = None
) -> dict:
    """Per caller: a key sees its own, an admin everyone's; the window is unix seconds, the last
    24 hours by default."""
    services = services_of(request)
    viewer = identify(request)
    end = time.time() if end_time is None else end_time
    start = end - 86_400 if start_time is None else start_time
    _check_window(start, end)
    pipeline, on_disk = services.pipeline, services.usage_file
    older = on_disk is not None and start < time.time() - pipeline.usage.retention_s
    used = await on_disk.report(start, end) if on_disk is not None and older else None
    rows = accounts(services.keyring, pipeline.usage, pipeline.limiter, viewer, start, end, caller, used)
    retention = on_disk.retention_s if on_disk is not None else RETENTION_S
    return {
        "object": "usage",
        "start_time": int(start),
        "end_time": int(end),
        "retention_s": int(retention),
        "data": [row.as_dict() for row in rows],
    }


@router.get("/v1/organization/usage/completions")
async def usage_completions(
    request: Request,
    start_time: int | None = None,
    end_time: int | None = None,
    bucket_width: str = "1d",
    group_by: list[str] | None = Query(None),  # noqa: B008
    limit: int | None = None,
    page: str | None = None,
) -> dict:
    """OpenAI's Usage API over the ledger, for admins: tools that read OpenAI's usage read ours.
    The key's name stands where OpenAI puts the key's id."""
    services = services_of(request)
    _require_admin(identify(request), "the usage API")  # before any check on the query: who asks comes first
    if start_time is None:
        raise APIError(400, "missing required parameter: 'start_time'", param="start_time")
    if bucket_width not in buckets.WIDTHS:
        raise APIError(
            400, f"bucket_width must be 1m, 1h or 1d; got {bucket_width!r}", param="bucket_width", code="invalid_value"
        )
    groups = tuple(group_by or ())
    if unknown := [g for g in groups if g not in buckets.GROUPS]:
        raise APIError(
            400,
            f"group_by {unknown[0]!r} is not supported; use api_key_id or model",
            param="group_by",
            code="unsupported_parameter",
        )
    default, most = buckets.LIMITS[bucket_width]
    shown = default if limit is None else limit
    if not 1 <= shown <= most:
        raise APIError(
            400, f"limit must be 1 to {most} for {bucket_width} buckets", param="limit", code="invalid_value"
        )
    end = int(time.time()) + 1 if end_time is None else end_time
    _check_window(start_time, end)
    start = start_time
    if page is not None:
        if not re.fullmatch(r"[0-9]{1,12}", page) or not start_time <= int(page) < end:
            raise APIError(400, "page must be the next_page of an earlier answer", param="page", code="invalid_value")
        start = int(page)
    step = buckets.WIDTHS[bucket_width]
    rows = await usage_rows(services.pipeline.usage, services.usage_file, start, min(end, start + (shown + 1) * step))
    found = buckets.page(rows, start, end, bucket_width, shown, groups, services.engine.capabilities.model)
    return {
        "object": "page",
        "data": found.buckets,
        "has_more": found.next_start is not None,
        "next_page": str(found.next_start) if found.next_start is not None else None,
    }


def _check_window(start: float, end: float) -> None:
    """Unix seconds from 1970 to a day ahead, start before end: anything else is no window (and
    a far one would make the ledger count buckets for nothing)."""
    if not (math.isfinite(start) and math.isfinite(end) and 0 <= start < end <= time.time() + 86_400):
        raise APIError(
            400,
            "start_time must be before end_time, both unix seconds up to a day from now",
            param="start_time",
            code="invalid_value",
        )


def _require_admin(caller: Caller, what: str) -> None:
    if not caller.admin:
        status = 401 if caller.name == ANONYMOUS else 403  # 403: known, but not an admin
        raise APIError(status, f"{what} needs an admin key", code="admin_key_required")


_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


def unrouted(routers: Sequence[APIRouter]) -> APIRouter:
    """A catch-all for any other /v1 or /api path or method, answered here rather than by the page
    mounted at /: 405 with Allow where one of `routers` has the path, else 404, each in its API's
    shape. Given the routers themselves: FastAPI may wrap what `include_router` adds to the app's routes."""
    routes = [route for r in routers for route in r.routes if isinstance(route, APIRoute)]

    async def no_such_route(request: Request, rest: str) -> Response:
        identify(request)  # with keys set, the route table is not shown to a caller without one
        allowed = sorted(
            {m for route in routes if route.matches(request.scope)[0] is Match.PARTIAL for m in route.methods or ()}
        )
        if allowed:
            raise APIError(
                405,
                f"{request.method} is not allowed on {request.url.path}; use {', '.join(allowed)}",
                headers={"Allow": ", ".join(allowed)},
            )
        raise APIError(404, f"no route {request.url.path}", code="not_found")

    catch_all = APIRouter()
    for prefix in ("/v1", "/api"):  # ours and OpenAI's, Ollama's
        catch_all.add_api_route(f"{prefix}/{{rest:path}}", no_such_route, methods=_METHODS, include_in_schema=False)
    return catch_all
