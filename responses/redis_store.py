"""Stored responses on Redis (`responses.backend: redis`, at `state.redis_url`), so a chain made
through one gateway continues through another behind the same load balancer. Each response is
one key that expires with `ttl_s`; a sorted set by age keeps the count under `max_responses`,
oldest first, and one per caller its own under `max_per_caller`. A write is acknowledged by Redis before the client hears the response completed;
what Redis keeps across its own restarts is its persistence setting (AOF, RDB). A Redis that
stops answering is a 503, never a response silently not stored."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from pipeline.refusal import Refusal
from responses.store import UNFINISHED, ChainedStore, StoredResponse, failed_by_a_stop

PREFIX = "gptoss:response:"
BY_AGE = "gptoss:responses:by-age"
BY_CALLER = "gptoss:responses:by-caller:"  # + the caller's name


class StoreUnavailable(RuntimeError):
    """The shared store cannot be reached at start: a configuration error, not a slow day."""


class RedisResponseStore(ChainedStore):
    def __init__(
        self,
        url: str,
        ttl_s: float,
        max_responses: int,
        owner: str,
        clock: Callable[[], float] = time.time,
        max_per_caller: int | None = None,
    ) -> None:
        self.url, self.ttl_s, self.max_responses, self.clock = url, ttl_s, max_responses, clock
        self.max_per_caller = max_per_caller or max_responses
        self.owner = owner  # this gateway: the one whose background responses it fails after a restart
        self._redis: Redis | None = None

    async def open(self) -> None:
        self._redis = Redis.from_url(self.url)
        try:
            await self._redis.ping()
            await self._fail_unfinished()
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"state.redis_url {self.url}: Redis does not answer ({exc})") from None

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()

    async def put(self, stored: StoredResponse) -> None:
        entry = {
            "caller": stored.caller,
            "created": stored.created,
            "previous_id": stored.previous_id,
            "response": stored.response,
            "input_items": stored.input_items,
            "owner": self.owner,
        }
        now, redis, own = self.clock(), self._client(), BY_CALLER + stored.caller
        async with redis.pipeline(transaction=True) as tx:
            tx.set(PREFIX + stored.id, json.dumps(entry, ensure_ascii=False), px=int(self.ttl_s * 1000))
            tx.zadd(BY_AGE, {stored.id: stored.created})
            tx.zadd(own, {stored.id: stored.created})
            tx.zremrangebyscore(BY_AGE, "-inf", now - self.ttl_s)
            tx.zremrangebyscore(own, "-inf", now - self.ttl_s)
            tx.pexpire(own, int(self.ttl_s * 1000))  # a caller gone quiet leaves no set behind
            tx.zcard(own)
            mine = (await self._run(tx.execute()))[-1]
        if mine > self.max_per_caller:  # the oldest first: those the global bound took already, so named here still
            await self._drop(await self._run(redis.zpopmin(own, mine - self.max_per_caller)), BY_AGE)
        count = await self._run(redis.zcard(BY_AGE))
        if count > self.max_responses:
            await self._drop(await self._run(redis.zpopmin(BY_AGE, count - self.max_responses)), None)

    async def _drop(self, popped: list[tuple[bytes, float]], index: str | None) -> None:
        """The responses popped off one sorted set, and their names in `index` too."""
        ids = [rid.decode() for rid, _ in popped]
        if ids:
            await self._run(self._client().delete(*(PREFIX + rid for rid in ids)))
            if index is not None:
                await self._run(self._client().zrem(index, *ids))

    async def update(self, response_id: str, caller: str, response: dict) -> None:
        entry = await self._entry(response_id, caller)
        if entry is not None:
            entry["response"] = response
            await self._run(
                self._client().set(PREFIX + response_id, json.dumps(entry, ensure_ascii=False), keepttl=True)
            )

    async def get(self, response_id: str, caller: str) -> StoredResponse | None:
        entry = await self._entry(response_id, caller)
        if entry is None:
            return None
        return StoredResponse(
            response_id, caller, entry["created"], entry["previous_id"], entry["response"], entry["input_items"]
        )

    async def delete(self, response_id: str, caller: str) -> bool:
        if await self._entry(response_id, caller) is None:
            return False
        await self._run(self._client().delete(PREFIX + response_id))
        await self._run(self._client().zrem(BY_AGE, response_id))
        await self._run(self._client().zrem(BY_CALLER + caller, response_id))
        return True

    async def _entry(self, response_id: str, caller: str) -> dict | None:
        raw = await self._run(self._client().get(PREFIX + response_id))
        entry = json.loads(raw) if raw else None
        return entry if entry is not None and entry["caller"] == caller else None

    async def _fail_unfinished(self) -> None:
        """This gateway's background responses that its last process did not finish."""
        redis = self._client()
        async for key in redis.scan_iter(match=PREFIX + "*", count=500):
            entry = json.loads(await redis.get(key) or "null")
            if entry and entry.get("owner") == self.owner and entry["response"].get("status") in UNFINISHED:
                entry["response"] = failed_by_a_stop(entry["response"])
                await redis.set(key, json.dumps(entry, ensure_ascii=False), keepttl=True)

    def _client(self) -> Redis:
        if self._redis is None:
            raise RuntimeError("the shared response store is not open")
        return self._redis

    async def _run(self, command: Any) -> Any:
        try:
            return await command
        except (RedisError, OSError) as exc:
            raise Refusal(
                503, f"the response store (Redis) does not answer: {exc}", code="store_unavailable", retry_after_s=1
            ) from None


def gateway_name(port: int) -> str:
    return f"{socket.gethostname()}:{port}"
