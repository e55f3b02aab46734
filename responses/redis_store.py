"""Stored responses on Redis (`responses.backend: redis`, at `state.redis_url`), so a chain made
through one gateway continues through another behind the same load balancer. Each response is
one key that expires with `ttl_s`; a sorted set by age keeps the count under `max_responses` and
the bytes under `max_bytes`, oldest first, and one per caller its own under `max_per_caller` and
`max_bytes_per_caller`. Each write, with the counts and every eviction it makes, is one Lua script,
so gateways writing at once never count a response twice or drop one uncounted; responses gone by
other means (Redis's own `maxmemory` eviction, a gateway of an earlier version) leave the counts at
each start and hourly. Every gateway keeps the same `ttl_s`: a write forgets those past it by its
own clock. A write is acknowledged by Redis before the client hears the response completed; what
Redis keeps across its own restarts is its persistence setting (AOF, RDB). A Redis that stops
answering is a 503, never a response silently not stored."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from pipeline.refusal import Refusal
from responses.store import UNFINISHED, ChainedStore, StoredResponse, failed_by_a_stop

PREFIX = "gptoss:response:"
BY_AGE = "gptoss:responses:by-age"
BY_CALLER = "gptoss:responses:by-caller:"  # + the caller's name
SIZES = "gptoss:responses:sizes"  # id -> "bytes|caller"
HELD = "gptoss:responses:held"  # caller -> bytes
TOTAL = "gptoss:responses:bytes"
_ROW = 128  # what a stored response costs beyond its text, as in the SQLite store
_UNBOUNDED = 1 << 62
SWEEP_INTERVAL_S = 3600.0

# KEYS: by-age, sizes, held, total. ARGV[1], ARGV[2]: the response and caller prefixes.
_FORGET = """
local function forget(rid)
  redis.call('DEL', ARGV[1] .. rid)
  redis.call('ZREM', KEYS[1], rid)
  local size = redis.call('HGET', KEYS[2], rid)
  if size then
    local bar = string.find(size, '|', 1, true)
    local bytes, caller = tonumber(string.sub(size, 1, bar - 1)), string.sub(size, bar + 1)
    redis.call('ZREM', ARGV[2] .. caller, rid)
    redis.call('HINCRBY', KEYS[3], caller, -bytes)
    redis.call('DECRBY', KEYS[4], bytes)
    redis.call('HDEL', KEYS[2], rid)
  end
end
"""
# KEYS[5]: the caller's set. ARGV: prefixes, id, caller, created, entry, ttl ms, expired before,
# max responses, max per caller, max bytes, max bytes per caller.
_PUT = (
    _FORGET
    + """
local id, caller, created, entry, ttl = ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7])
for _, rid in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[8], 'LIMIT', 0, 500)) do forget(rid) end
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', '(' .. ARGV[8])
forget(id)
local size = string.len(entry) + tonumber(ARGV[13])
redis.call('SET', ARGV[1] .. id, entry, 'PX', ttl)
redis.call('ZADD', KEYS[1], created, id)
redis.call('ZADD', KEYS[5], created, id)
redis.call('PEXPIRE', KEYS[5], ttl)
redis.call('HSET', KEYS[2], id, size .. '|' .. caller)
redis.call('HINCRBY', KEYS[3], caller, size)
redis.call('INCRBY', KEYS[4], size)
local function trim(set, held, most, most_bytes)
  for _ = 1, 1000 do
    if redis.call('ZCARD', set) <= most and tonumber(held() or '0') <= most_bytes then return end
    local oldest = redis.call('ZRANGE', set, 0, 1)
    local rid = oldest[1] == id and oldest[2] or oldest[1]
    if not rid then return end
    forget(rid)
    redis.call('ZREM', set, rid)
  end
end
trim(KEYS[5], function() return redis.call('HGET', KEYS[3], caller) end, tonumber(ARGV[10]), tonumber(ARGV[12]))
trim(KEYS[1], function() return redis.call('GET', KEYS[4]) end, tonumber(ARGV[9]), tonumber(ARGV[11]))
"""
)
# ARGV: prefixes, id, entry (its new text, the key's TTL kept).
_UPDATE = """
local id, entry = ARGV[3], ARGV[4]
if redis.call('EXISTS', ARGV[1] .. id) == 0 then return 0 end
redis.call('SET', ARGV[1] .. id, entry, 'KEEPTTL')
local size = redis.call('HGET', KEYS[2], id)
if size then
  local bar = string.find(size, '|', 1, true)
  local old, caller = tonumber(string.sub(size, 1, bar - 1)), string.sub(size, bar + 1)
  local new = string.len(entry) + tonumber(ARGV[5])
  redis.call('HSET', KEYS[2], id, new .. '|' .. caller)
  redis.call('HINCRBY', KEYS[3], caller, new - old)
  redis.call('INCRBY', KEYS[4], new - old)
end
return 1
"""
_DELETE = _FORGET + "forget(ARGV[3])"
# Size records whose response is gone by other means (a gateway of an earlier version evicting,
# Redis's own maxmemory eviction): forgotten, so the counts come back to the truth. ARGV[3...]: ids.
_SWEEP = (
    _FORGET
    + """
local n = 0
for i = 3, #ARGV do
  if redis.call('EXISTS', ARGV[1] .. ARGV[i]) == 0 then forget(ARGV[i]); n = n + 1 end
end
return n
"""
)
# A response stored before the bytes were counted (ARGV: prefixes, id, caller): counted once, by
# whichever gateway comes first.
_ADOPT = """
local entry = redis.call('GET', ARGV[1] .. ARGV[3])
if not entry then return 0 end
local size = string.len(entry) + tonumber(ARGV[5])
if redis.call('HSETNX', KEYS[2], ARGV[3], size .. '|' .. ARGV[4]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[3], ARGV[4], size)
redis.call('INCRBY', KEYS[4], size)
return 1
"""


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
        max_bytes: int | None = None,
        max_bytes_per_caller: int | None = None,
    ) -> None:
        self.url, self.ttl_s, self.max_responses, self.clock = url, ttl_s, max_responses, clock
        self.max_per_caller = max_per_caller or max_responses
        self.max_bytes = max_bytes or _UNBOUNDED
        self.max_bytes_per_caller = max_bytes_per_caller or self.max_bytes
        self.owner = owner  # this gateway: the one whose background responses it fails after a restart
        self._redis: Redis | None = None
        self._scripts: dict[str, AsyncScript] = {}
        self._swept = 0.0

    async def open(self) -> None:
        self._redis = Redis.from_url(self.url)
        try:
            await self._redis.ping()
            await self._fail_unfinished()
            await self._sweep()
        except (RedisError, OSError, Refusal) as exc:
            await self._redis.aclose()
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
        text = json.dumps(entry, ensure_ascii=False)
        bounds = (self.max_responses, self.max_per_caller, self.max_bytes, self.max_bytes_per_caller, _ROW)
        await self._script(
            _PUT,
            [BY_CALLER + stored.caller],
            stored.id,
            stored.caller,
            stored.created,
            text,
            int(self.ttl_s * 1000),
            self.clock() - self.ttl_s,
            *bounds,
        )
        if self.clock() - self._swept > SWEEP_INTERVAL_S:
            await self._sweep()

    async def update(self, response_id: str, caller: str, response: dict) -> None:
        entry = await self._entry(response_id, caller)
        if entry is not None:
            entry["response"] = response
            await self._script(_UPDATE, [], response_id, json.dumps(entry, ensure_ascii=False), _ROW)

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
        await self._script(_DELETE, [], response_id)
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
            if entry:
                await self._script(_ADOPT, [], key.decode()[len(PREFIX) :], entry["caller"], _ROW)
            if entry and entry.get("owner") == self.owner and entry["response"].get("status") in UNFINISHED:
                entry["response"] = failed_by_a_stop(entry["response"])
                await redis.set(key, json.dumps(entry, ensure_ascii=False), keepttl=True)

    async def _sweep(self) -> None:
        """The counts back to the truth: at open, and hourly at a write."""
        self._swept = self.clock()
        batch: list[str] = []
        async for rid, _ in self._client().hscan_iter(SIZES, count=500):
            batch.append(rid.decode())
            if len(batch) == 500:
                await self._script(_SWEEP, [], *batch)
                batch = []
        if batch:
            await self._script(_SWEEP, [], *batch)

    async def _script(self, lua: str, keys: list[str], *args: Any) -> Any:
        """One of the scripts above, on the store's shared keys (and `keys` after them)."""
        script = self._scripts.get(lua) or self._scripts.setdefault(lua, self._client().register_script(lua))
        return await self._run(script(keys=[BY_AGE, SIZES, HELD, TOTAL, *keys], args=[PREFIX, BY_CALLER, *args]))

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
