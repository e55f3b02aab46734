"""Who is calling: identified once from a key, carried on every request, log line and queue event."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

from cache.keys import namespace_for
from pipeline.refusal import Refusal
from scheduler.request import PriorityClass
from settings.schema import Config, KeyConfig, Limits

ANONYMOUS = "anonymous"


@dataclass(slots=True, frozen=True)
class Caller:
    """`name` is safe to show and log (never the key). `key_class` is the class the key runs at
    when the request names none; `ceiling` the highest it may ask for (named keys); `admin` may
    change server-wide settings and see everyone's usage (everyone may only on a server without
    any key); `metrics` may read /metrics without being an admin."""

    name: str
    key_class: PriorityClass | None = None
    ceiling: PriorityClass | None = None
    admin: bool = False
    metrics: bool = False
    cache_namespace: str = ""
    limits: Limits = field(default_factory=Limits)


class Keyring:
    """Keys are held as SHA-256 digests only, so a named key may be configured by its digest."""

    def __init__(self, config: Config) -> None:
        self.config = config
        server = config.server
        self._keys: dict[str, Caller] = {}  # by the key's digest; the namespace is filled in per call
        for key in {*server.api_keys, *config.scheduler.priority_keys, *server.admin_keys}:
            high = PriorityClass.HIGH if key in config.scheduler.priority_keys else None
            self._keys[digest(key)] = Caller(
                key_name(key), high, admin=key in server.admin_keys, limits=server.default_limits
            )
        for named in server.keys:
            self._put(named)
        self.configured = {c.name for c in self._keys.values()}  # read-only: made at run time they are not
        self._any_admin = any(k.admin for k in self._keys.values())
        self._required = bool(server.api_keys or server.keys)

    def _put(self, named: KeyConfig) -> None:
        cls = PriorityClass(named.priority_class)
        self._keys[(named.key_sha256 or digest(named.key or "")).lower()] = Caller(
            named.name, cls, cls, named.admin, named.metrics, limits=named.over(self.config.server.default_limits)
        )

    def add(self, named: KeyConfig) -> None:
        """A key made (or changed, or rotated) at run time: any earlier key of that name stops at once."""
        self.remove(named.name)
        self._put(named)

    def remove(self, name: str) -> bool:
        """A run-time key revoked at once; the configured ones stay."""
        gone = [d for d, c in self._keys.items() if c.name == name and name not in self.configured]
        for d in gone:
            del self._keys[d]
        return bool(gone)

    def is_known_name(self, name: str) -> bool:
        return any(c.name == name for c in self._keys.values())

    def named(self) -> list[Caller]:
        """Every named caller, configured and made at run time."""
        return sorted({c.name: c for c in self._keys.values()}.values(), key=lambda c: c.name)

    @property
    def keys_required(self) -> bool:
        """Every call needs a known key."""
        return self._required

    @property
    def any_keys(self) -> bool:
        return bool(self._keys)

    @property
    def any_admin(self) -> bool:
        return self._any_admin

    def limits_by_name(self) -> dict[str, Limits]:
        """Every configured caller's limits, anonymous included."""
        out = {k.name: k.limits for k in self._keys.values()}
        return {ANONYMOUS: self.config.server.anonymous_limits, **dict(sorted(out.items()))}

    def identify(self, bearer: str | None, token: str | None = None) -> Caller:
        """Keys come as a bearer key or a `token`. With keys required, every call needs a known
        key. Otherwise the service is open and any bearer key is accepted (the openai client
        always sends one), but a `token` that is not known is refused: the caller asked for a key's
        rights with a key we do not know."""
        key = token or bearer
        if self._required and not self.is_known(key):
            raise Refusal(401, "invalid or missing API key", code="invalid_api_key")
        if token is not None and not self.is_known(token):
            raise Refusal(401, "invalid token: not a known API key", param="token", code="invalid_api_key")
        return self.caller_for(key)

    def caller_for(self, key: str | None) -> Caller:
        known = self._lookup(key) or Caller(ANONYMOUS, limits=self.config.server.anonymous_limits)
        return replace(
            known, admin=known.admin or not self._keys, cache_namespace=namespace_for(key, self.config.cache)
        )

    def by_name(self, name: str) -> Caller | None:
        """A configured caller by its name (anonymous too, where the server takes calls without a
        key): batch lines run as their owner long after its request; None once its key is gone."""
        if name == ANONYMOUS and not self._required:
            return self.caller_for(None)
        known = next((c for c in self._keys.values() if c.name == name), None)
        return replace(known, admin=known.admin or not self._keys) if known is not None else None

    def by_digest(self, key_digest: str, namespace: str) -> Caller | None:
        """The caller of a key known by its digest, as it stands now (a page session asks on every
        call: a key revoked, rotated or changed at run time takes effect there at once too)."""
        known = self._keys.get(key_digest)
        if known is None:
            return None
        return replace(known, admin=known.admin or not self._keys, cache_namespace=namespace)

    def is_known(self, key: str | None) -> bool:
        return self._lookup(key) is not None

    def _lookup(self, key: str | None) -> Caller | None:
        return self._keys.get(digest(key)) if key else None


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def key_name(key: str) -> str:
    """A stable name for an unnamed key, safe to show: a short digest, not the key."""
    return "key-" + digest(key)[:8]
