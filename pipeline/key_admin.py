"""Keys at run time: make one (its secret returned once), change its class or limits, rotate it,
revoke it, list every key (never a secret); each change stored with its audit entry and applied
to the keyring at once. One place for the API (`/v1/admin/keys`) and the page's Admin tab; the
keys from the configuration are listed too, and stay read-only."""

from __future__ import annotations

import logging
import secrets
from typing import Any

from pydantic import ValidationError

from pipeline.caller import Caller, Keyring, digest
from pipeline.key_store import KeyStore
from pipeline.refusal import Refusal
from settings.schema import KeyConfig

log = logging.getLogger("gpt_oss_webui.keys")
FIELDS = {"name", "class", "rpm", "tpm", "max_parallel", "max_queued", "daily_tokens", "admin", "metrics"}


def admin_check(caller: Caller, keyring: Keyring, store: KeyStore | None) -> KeyStore:
    if not caller.admin or not keyring.keys_required:
        raise Refusal(
            403 if keyring.is_known_name(caller.name) else 401,
            "managing keys needs an admin key (on a server whose configuration names keys)",
            code="admin_key_required",
        )
    if store is None:
        raise Refusal(
            501, "keys made at run time need `usage.path` (the ledger's file) to keep them", code="not_configured"
        )
    return store


def shape(caller: Caller, source: str, created: float | None = None) -> dict:
    return {
        "object": "api_key",
        "name": caller.name,
        "class": caller.key_class.value if caller.key_class else None,
        "admin": caller.admin,
        "metrics": caller.metrics,
        "limits": caller.limits.model_dump(),
        "source": source,
        "created_at": int(created) if created else None,
    }


async def listed(keyring: Keyring, store: KeyStore) -> list[dict]:
    made = {config.name: created for config, created in await store.keys()}
    return [shape(c, "api" if c.name in made else "config", made.get(c.name)) for c in keyring.named()]


async def create(keyring: Keyring, store: KeyStore, actor: str, data: dict[str, Any]) -> dict:
    name = data.get("name")
    if not isinstance(name, str):
        raise Refusal(400, "name must be the new key's name", param="name", code="invalid_value")
    secret = new_secret()
    config = _config(data, name, secret)
    async with store.lock:
        if keyring.is_known_name(name) or not await store.put(config, actor, "create", _detail(config)):
            raise Refusal(
                409,
                f"the name {name!r:.80} is or was a key's: its files, batches and usage stay its own; choose another",
                param="name",
                code="invalid_value",
            )
        keyring.add(config)
    return {**shape(_named(keyring, name), "api", store.clock()), "key": secret}


async def update(keyring: Keyring, store: KeyStore, actor: str, name: str, data: dict[str, Any]) -> dict:
    if "name" in data:
        raise Refusal(400, "a key's name cannot change; make a new key", param="name", code="invalid_value")
    async with store.lock:
        current, created = await _made(store, name)
        fields = {**current.model_dump(by_alias=True, exclude={"name", "key", "key_sha256"}), **data}
        changed = _config(fields, name, "").model_copy(update={"key_sha256": current.key_sha256})
        await _put(store, changed, actor, "update", _detail(changed))
        keyring.add(changed)
    return shape(_named(keyring, name), "api", created)


async def rotate(keyring: Keyring, store: KeyStore, actor: str, name: str) -> dict:
    secret = new_secret()
    async with store.lock:
        current, created = await _made(store, name)
        rotated = current.model_copy(update={"key_sha256": digest(secret)})
        await _put(store, rotated, actor, "rotate", {})
        keyring.add(rotated)  # the old secret stops at once
    return {**shape(_named(keyring, name), "api", created), "key": secret}


async def revoke(keyring: Keyring, store: KeyStore, actor: str, name: str) -> None:
    async with store.lock:
        await _made(store, name)
        await store.delete(name, actor)
        keyring.remove(name)


async def _put(store: KeyStore, key: KeyConfig, actor: str, action: str, detail: dict) -> None:
    if not await store.put(key, actor, action, detail):
        raise Refusal(404, f"no key made at run time named {key.name!r:.80}", param="name", code="not_found")


async def load_keys(keyring: Keyring, store: KeyStore) -> None:
    """The keys made at run time, at start: only where the configuration names keys (an open
    server stays open), and none that now shares a configured key's name."""
    if not keyring.keys_required:
        return
    for made, _ in await store.keys():
        if made.name in keyring.configured:
            log.warning("key %s made at run time is not loaded: the configuration names a key %s", made.name, made.name)
        else:
            keyring.add(made)


def new_secret() -> str:
    return "sk-" + secrets.token_urlsafe(32)


def _config(data: dict[str, Any], name: str, secret: str) -> KeyConfig:
    if unknown := sorted(set(data) - FIELDS):
        raise Refusal(
            400,
            f"unrecognized request argument supplied: {unknown[0]:.80}",
            param=unknown[0][:80],
            code="unsupported_parameter",
        )
    try:
        return KeyConfig.model_validate({**data, "name": name, "key_sha256": digest(secret)})
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or "body"
        raise Refusal(400, f"invalid value for {param!r}: {first['msg']}", param=param, code="invalid_value") from None


async def _made(store: KeyStore, name: str) -> tuple[KeyConfig, float]:
    for config, created in await store.keys():
        if config.name == name:
            return config, created
    raise Refusal(
        404,
        f"no key made at run time named {name!r:.80} (keys from the configuration are read-only)",
        param="name",
        code="not_found",
    )


def _named(keyring: Keyring, name: str) -> Caller:
    return next(c for c in keyring.named() if c.name == name)


def _detail(config: KeyConfig) -> dict:
    return config.model_dump(by_alias=True, exclude={"name", "key", "key_sha256"})
