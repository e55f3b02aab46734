"""Keys at run time for admins (`/v1/admin/keys`), as LiteLLM's virtual keys on our named keys,
and the audit log of admin actions (`/v1/admin/audit`). The work is pipeline/key_admin.py's."""

from __future__ import annotations

from fastapi import APIRouter, Request

from api.auth import identify
from api.body import read_object
from api.deps import services_of
from api.errors import APIError
from pipeline import key_admin
from pipeline.key_store import KeyStore

router = APIRouter()


def _admin(request: Request) -> tuple[str, KeyStore]:
    services = services_of(request)
    caller = identify(request)
    return caller.name, key_admin.admin_check(caller, services.keyring, services.key_store)


@router.post("/v1/admin/keys")
async def create_key(request: Request) -> dict:
    actor, store = _admin(request)
    return await key_admin.create(services_of(request).keyring, store, actor, await read_object(request))


@router.get("/v1/admin/keys")
async def list_keys(request: Request) -> dict:
    _, store = _admin(request)
    return {"object": "list", "data": await key_admin.listed(services_of(request).keyring, store)}


@router.patch("/v1/admin/keys/{name}")
async def update_key(request: Request, name: str) -> dict:
    actor, store = _admin(request)
    return await key_admin.update(services_of(request).keyring, store, actor, name, await read_object(request))


@router.post("/v1/admin/keys/{name}/rotate")
async def rotate_key(request: Request, name: str) -> dict:
    actor, store = _admin(request)
    return await key_admin.rotate(services_of(request).keyring, store, actor, name)


@router.delete("/v1/admin/keys/{name}")
async def delete_key(request: Request, name: str) -> dict:
    actor, store = _admin(request)
    await key_admin.revoke(services_of(request).keyring, store, actor, name)
    return {"object": "api_key.deleted", "name": name, "deleted": True}


@router.get("/v1/admin/audit")
async def audit_log(request: Request, limit: int = 100) -> dict:
    _, store = _admin(request)
    if not 1 <= limit <= 1000:
        raise APIError(400, f"limit must be 1 to 1000; got {limit}", param="limit", code="invalid_value")
    return {"object": "list", "data": await store.audit_log(limit)}
