"""OpenAI's Files and Batch APIs (`/v1/files`, `/v1/batches`) over the batch store (how a line is
answered: api/batch_lines.py). Every read and change is the caller's own."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException

from api.auth import identify
from api.body import read_object
from api.deps import batch_runner_of, services_of
from api.errors import APIError
from batches import shapes
from batches.store import BatchStore, StorageFull, new_id
from pipeline.caller import Caller

router = APIRouter()


# files


@router.post("/v1/files")
async def create_file(request: Request) -> dict:
    services = services_of(request)
    caller = identify(request)
    services.pipeline.limiter.admit_request(caller)
    limit = services.config.batches.max_file_bytes
    try:
        async with request.form(max_files=1, max_fields=4, max_part_size=limit) as form:
            purpose, upload = form.get("purpose"), form.get("file")
            if purpose != "batch":
                raise APIError(
                    400, f"purpose must be batch; got {shapes.shown(purpose)}", param="purpose", code="invalid_value"
                )
            if not isinstance(upload, UploadFile):
                raise APIError(400, "missing required parameter: 'file'", param="file")
            content = await upload.read(limit + 1)
            filename = (upload.filename or "input.jsonl")[:255]
    except (MultiPartException, AssertionError) as exc:
        raise APIError(400, f"the body must be multipart/form-data with `file` and `purpose`: {exc}") from None
    if len(content) > limit:
        raise APIError(413, f"the file is larger than the limit of {limit} bytes", param="file", code="file_too_large")
    try:
        return (await services.batches.put_file(caller.name, purpose, filename, content)).shape()
    except StorageFull as exc:
        raise APIError(400, str(exc), param="file", code="storage_limit_reached") from None


@router.get("/v1/files")
async def list_files(
    request: Request, purpose: str | None = None, after: str | None = None, limit: int = 10_000, order: str = "desc"
) -> dict:
    caller = identify(request)
    _check_page(limit, order, 10_000)
    files = await services_of(request).batches.files(caller.name, purpose, after, limit + 1, order == "desc")
    return _page([f.shape() for f in files], limit)


@router.get("/v1/files/{file_id}")
async def get_file(request: Request, file_id: str) -> dict:
    caller = identify(request)
    stored = await services_of(request).batches.file(file_id, caller.name)
    if stored is None:
        raise _not_found("file", file_id)
    return stored.shape()


@router.get("/v1/files/{file_id}/content")
async def file_content(request: Request, file_id: str) -> Response:
    caller = identify(request)
    content = await services_of(request).batches.content(file_id, caller.name)
    if content is None:
        raise _not_found("file", file_id)
    return Response(content, media_type="application/jsonl")


@router.delete("/v1/files/{file_id}")
async def delete_file(request: Request, file_id: str) -> dict:
    caller = identify(request)
    if not await services_of(request).batches.delete_file(file_id, caller.name):
        raise _not_found("file", file_id)
    return {"id": file_id, "object": "file", "deleted": True}


# batches

_CREATE_FIELDS = {"input_file_id", "endpoint", "completion_window", "metadata"}


@router.post("/v1/batches")
async def create_batch(request: Request) -> dict:
    services = services_of(request)
    caller = identify(request)
    services.pipeline.limiter.admit_request(caller)
    data = await read_object(request)
    if unknown := sorted(set(data) - _CREATE_FIELDS):
        raise APIError(
            400, f"unrecognized request argument supplied: {unknown[0]}", param=unknown[0], code="unsupported_parameter"
        )
    file_id, endpoint, window = data.get("input_file_id"), data.get("endpoint"), data.get("completion_window")
    metadata = _metadata(data.get("metadata"))
    if endpoint not in shapes.ENDPOINTS:
        raise APIError(
            400,
            f"endpoint must be one of {', '.join(shapes.ENDPOINTS)}; got {shapes.shown(endpoint)}",
            param="endpoint",
            code="invalid_value",
        )
    if window != "24h":
        raise APIError(
            400,
            f"completion_window must be 24h; got {shapes.shown(window)}",
            param="completion_window",
            code="invalid_value",
        )
    if not isinstance(file_id, str) or await services.batches.file(file_id, caller.name) is None:
        raise APIError(404, f"no file {shapes.shown(file_id)}", param="input_file_id", code="not_found")
    config = services.config.batches
    state = shapes.new_batch(
        new_id("batch"), file_id, endpoint, window, metadata, services.batches.clock(), config.completion_window_s
    )
    try:
        await services.batches.put_batch(caller.name, caller.cache_namespace, state, config.max_unfinished)
    except StorageFull as exc:
        raise APIError(429, f"{exc}; wait for one or cancel it", code="too_many_batches") from None
    batch_runner_of(request).add(caller.name, caller.cache_namespace, state)
    return state


@router.get("/v1/batches")
async def list_batches(request: Request, after: str | None = None, limit: int = 20) -> dict:
    caller = identify(request)
    _check_page(limit, "desc", 100)
    store = services_of(request).batches
    found = await store.batches(caller.name, after, limit + 1)
    return _page([await _current(store, b) for b in found[:limit]] + found[limit:], limit)


@router.get("/v1/batches/{batch_id}")
async def get_batch(request: Request, batch_id: str) -> dict:
    caller = identify(request)
    store = services_of(request).batches
    return await _current(store, await _batch(store, batch_id, caller))


@router.post("/v1/batches/{batch_id}/cancel")
async def cancel_batch(request: Request, batch_id: str) -> dict:
    services = services_of(request)
    caller = identify(request)
    was = (await _batch(services.batches, batch_id, caller))["status"]
    state = await services.batches.cancel(batch_id, caller.name) or {"status": "gone"}
    if state["status"] == "cancelling":
        batch_runner_of(request).cancel(batch_id, state)
    if was not in ("validating", "in_progress", "cancelling"):
        raise APIError(
            409,
            f"batch {batch_id} is {state['status']}: only a batch in progress can be cancelled",
            param="batch_id",
            code="invalid_state",
        )
    return await _current(services.batches, state)


async def _batch(store: BatchStore, batch_id: str, caller: Caller) -> dict:
    state = await store.batch(batch_id, caller.name)
    if state is None:
        raise _not_found("batch", batch_id)
    return state


async def _current(store: BatchStore, state: dict) -> dict:
    """Counts as of now while lines run; the stored ones once the batch has ended."""
    if state["status"] in ("in_progress", "cancelling", "finalizing"):
        return shapes.with_counts(state, await store.counts(state["id"]))
    return state


def _metadata(value: object) -> dict | None:
    if value is None:
        return None
    if not (
        isinstance(value, dict)
        and len(value) <= 16
        and all(isinstance(k, str) and len(k) <= 64 and isinstance(v, str) and len(v) <= 512 for k, v in value.items())
    ):
        raise APIError(
            400,
            "metadata: at most 16 string keys (64 characters) with string values (512)",
            param="metadata",
            code="invalid_value",
        )
    return value


def _page(items: list[dict], limit: int) -> dict:
    """OpenAI's list: `limit` items of the `limit + 1` read, and whether there are more."""
    shown = items[:limit]
    return {
        "object": "list",
        "data": shown,
        "first_id": shown[0]["id"] if shown else None,
        "last_id": shown[-1]["id"] if shown else None,
        "has_more": len(items) > limit,
    }


def _check_page(limit: int, order: str, most: int) -> None:
    if not 1 <= limit <= most:
        raise APIError(400, f"limit must be 1 to {most}; got {limit}", param="limit", code="invalid_value")
    if order not in ("asc", "desc"):
        raise APIError(400, f"order must be asc or desc; got {order!r}", param="order", code="invalid_value")


def _not_found(kind: str, item_id: str) -> APIError:
    return APIError(404, f"no {kind} with id {shapes.shown(item_id)}", param=f"{kind}_id", code="not_found")
