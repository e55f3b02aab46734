"""Routes other than chat: models, queue status, health."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from api.auth import identify
from api.chat import create_chat_completion
from api.errors import APIError
from scheduler.snapshot import snapshot
from scheduler.status import overall_status, request_status
from wiring import Services

router = APIRouter()
router.add_api_route("/v1/chat/completions", create_chat_completion, methods=["POST"])

_STARTED = int(time.time())


def _services(request: Request) -> Services:
    return request.app.state.services


@router.get("/v1/models")
async def list_models(request: Request) -> dict:
    services = _services(request)
    identify(request)
    caps = services.engine.capabilities
    return {"object": "list", "data": [{"id": caps.model, "object": "model", "created": _STARTED,
                                        "owned_by": "gpt-oss-webui", "max_model_len": caps.max_model_len}]}


@router.get("/v1/queue/status")
async def queue_status(request: Request, request_id: str | None = None) -> dict:
    services = _services(request)
    identify(request)
    if request_id is not None:
        return request_status(services.scheduler, request_id)
    return overall_status(snapshot(services.scheduler))


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(request.app.state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


@router.get("/livez")
async def livez() -> dict:
    """Liveness: the process and its event loop answer. Readiness is /healthz."""
    return {"status": "alive"}


@router.get("/healthz")
async def healthz(request: Request) -> JSONResponse:
    if _services(request).engine.ready:
        return JSONResponse({"status": "ok"})
    return JSONResponse({"status": "loading", "message": "the engine is loading the model"}, status_code=503)


@router.get("/v1/cache/stats")
async def cache_stats(request: Request) -> dict:
    services = _services(request)
    identify(request)
    if services.cache is None:
        return {"object": "cache.stats", "enabled": False}
    return services.cache.stats()


@router.delete("/v1/cache")
async def clear_cache(request: Request) -> dict:
    services = _services(request)
    if not identify(request).admin:
        raise APIError(401, "clearing the cache needs an admin key", code="admin_key_required")
    removed = await services.cache.clear() if services.cache is not None else 0
    return {"object": "cache.cleared", "removed": removed}
