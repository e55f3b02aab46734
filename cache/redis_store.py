"""The response cache on Redis, shared by every gateway that points at the same server: the same
keys as the SQLite cache, each entry living `ttl_s` (Redis expires it; give the server a
`maxmemory` with `allkeys-lru` to bound it). A short lock per key lets one gateway generate an
answer while the others wait for it, the single flight of one process stretched across many."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import asdict
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from cache.keys import CacheKey
from cache.store import CachedResponse
from settings.schema import CacheConfig

log = logging.getLogger("gpt_oss_webui.cache")

PREFIX = "gptoss:cache:"
LOCK_PREFIX = "gptoss:lock:"
LOCK_S = 60.0  # the longest one gateway may hold a key for the others
POLL_S = 0.05


class CacheUnavailable(RuntimeError):
    """The shared cache cannot be reached at start: a configuration error, not a slow day."""


class RedisResponseCache:
    def __init__(self, config: CacheConfig, url: str) -> None:
        self.config = config
        self.url = url
        self._redis: Redis | None = None
        self._writes: set[asyncio.Task] = set()
        self.hits = self.misses = self.errors = 0
        self._down = False

    async def open(self) -> None:
        self._redis = Redis.from_url(self.url)
        try:
            await self._redis.ping()
        except (RedisError, OSError) as exc:
            raise CacheUnavailable(f"state.redis_url {self.url}: Redis does not answer ({exc})") from None

    async def close(self) -> None:
        await self.flush()
        if self._redis is not None:
            await self._redis.aclose()

    async def get(self, key: CacheKey) -> CachedResponse | None:
        raw = await self._call(self._client().get(PREFIX + key.digest))
        entry = json.loads(raw) if raw else None
        if entry is None or entry["canonical"] != key.canonical:  # a hash collision never answers
            self.misses += 1
            return None
        self.hits += 1
        return CachedResponse(**entry["response"])

    def put(self, key: CacheKey, response: CachedResponse) -> None:
        """Returns at once; the write happens in the background."""
        body = json.dumps({"canonical": key.canonical, "response": asdict(response)}, ensure_ascii=False)
        if len(body.encode()) > self.config.max_bytes:
            return
        task = asyncio.create_task(self._call(self._client().set(PREFIX + key.digest, body, ex=int(self.config.ttl_s))))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def claim(self, key: CacheKey) -> bool:
        """True when this gateway may generate the answer; False while another one is at it (and
        True when Redis does not answer: nobody waits on a lock that cannot be read)."""
        lock = self._client().set(LOCK_PREFIX + key.digest, "1", nx=True, px=int(LOCK_S * 1000))
        return bool(await self._call(lock, failed=True))  # None: another gateway holds it

    async def unclaim(self, key: CacheKey) -> None:
        await self._call(self._client().delete(LOCK_PREFIX + key.digest))

    async def answer_of_another(self, key: CacheKey) -> CachedResponse | None:
        """Waits while another gateway holds the key; its answer, or None if it gave up."""
        while await self._call(self._client().exists(LOCK_PREFIX + key.digest)):
            await asyncio.sleep(POLL_S)
        raw = await self._call(self._client().get(PREFIX + key.digest))
        if not raw:
            return None
        entry = json.loads(raw)
        return CachedResponse(**entry["response"]) if entry["canonical"] == key.canonical else None

    async def clear(self) -> int:
        removed, redis = 0, self._client()
        async for name in redis.scan_iter(match=PREFIX + "*", count=500):
            removed += await redis.delete(name)
        return removed

    def shared_hit(self) -> None:
        self.misses -= 1
        self.hits += 1

    async def flush(self) -> None:
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)

    def stats(self) -> dict[str, Any]:
        lookups = self.hits + self.misses
        return {
            "object": "cache.stats",
            "enabled": True,
            "backend": "redis",
            "hits": self.hits,
            "misses": self.misses,
            "hit_rate": round(self.hits / lookups, 4) if lookups else 0.0,
            "errors": self.errors,
            "ttl_s": self.config.ttl_s,
        }

    def _client(self) -> Redis:
        if self._redis is None:
            raise RuntimeError("the shared response cache is not open")
        return self._redis

    async def _call(self, command: Any, failed: Any = None) -> Any:
        """A Redis that stops answering costs cache hits, never an answer (logged once each way)."""
        try:
            result = await command
        except (RedisError, OSError) as exc:
            if not self._down:
                log.warning("redis cache: %s; answering without the cache until Redis is back", exc)
            self.errors += 1
            self._down = True
            return failed
        if self._down:
            log.warning("redis cache: Redis answers again")
            self._down = False
        return result
