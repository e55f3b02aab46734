"""Who is calling: identified once from a key, carried on every request, log line and queue event."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from cache.keys import namespace_for
from pipeline.refusal import Refusal
from settings.schema import Config

ANONYMOUS = "anonymous"


@dataclass(slots=True, frozen=True)
class Caller:
    """`name` is safe to show and log (never the key); `priority_key` entitles the caller to the
    high class; `admin` may change server-wide settings (everyone may when no admin key is set)."""

    name: str
    priority_key: bool = False
    admin: bool = False
    cache_namespace: str = ""


class Keyring:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._api = set(config.server.api_keys)
        self._priority = set(config.scheduler.priority_keys)
        self._admin = set(config.server.admin_keys)
        self._known = self._api | self._priority | self._admin

    @property
    def keys_required(self) -> bool:
        """Every call needs a known key."""
        return bool(self._api)

    @property
    def any_keys(self) -> bool:
        return bool(self._known)

    def identify(self, bearer: str | None, token: str | None = None) -> Caller:
        """Keys come as a bearer key or a `token`. With `server.api_keys` set, every call needs a
        known key. Without it the service is open and any bearer key is accepted (the openai client
        always sends one), but a `token` that is not known is refused: the caller asked for a key's
        rights with a key we do not know."""
        key = token or bearer
        if self._api and key not in self._known:
            raise Refusal(401, "invalid or missing API key", code="invalid_api_key")
        if token is not None and token not in self._known:
            raise Refusal(401, "invalid token: not a known API key", param="token", code="invalid_api_key")
        return self.caller_for(key)

    def caller_for(self, key: str | None) -> Caller:
        known = key is not None and key in self._known
        return Caller(
            name=key_name(key) if known else ANONYMOUS,
            priority_key=key in self._priority,
            admin=key in self._admin or not self._admin,
            cache_namespace=namespace_for(key, self.config.cache),
        )

    def is_known(self, key: str) -> bool:
        return key in self._known


def key_name(key: str) -> str:
    """A stable name for an unnamed key, safe to show: a short digest, not the key."""
    return "key-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:8]
