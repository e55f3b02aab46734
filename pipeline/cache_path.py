"""The response cache on the request path: plan (MISS or BYPASS), lookup with single flight, and
write-back of finished answers."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from cache.flight import SingleFlight
from cache.keys import CacheKey, KeyedRequest, is_cacheable, make_key
from cache.redis_store import RedisResponseCache
from cache.similar import Pairing
from cache.similar_index import Match
from cache.store import CachedResponse, ResponseCache
from pipeline.call_params import ChatParams, ChatTurn
from settings.schema import CacheConfig


@dataclass(slots=True)
class CachePlan:
    key: CacheKey | None = None  # None: the cache is bypassed
    read: bool = False
    leader: bool = False
    claimed: bool = False  # holds the key for the other gateways sharing the cache
    similar_ok: bool = True  # `"cache": "exact"` asks for exact hits only
    similar: Match | None = None  # set when the answer is another request's, found similar

    @property
    def status(self) -> str:
        return "MISS" if self.key is not None else "BYPASS"

    @property
    def pairing(self) -> Pairing | None:
        if self.similar is None or self.key is None:
            return None
        return Pairing(self.similar.digest, self.key.digest)


class CachePath:
    def __init__(
        self, cache: ResponseCache | RedisResponseCache | None, config: CacheConfig, flight: SingleFlight | None = None
    ) -> None:
        self.cache = cache
        self.config = config
        self.flight = flight or SingleFlight()

    def plan(self, model: str, body: ChatParams, namespace: str, cache_control: str = "") -> CachePlan:
        """`Cache-Control: no-store` or `"cache": false` bypass the cache; `no-cache` skips the
        lookup (exact and similar) but stores the fresh answer; `"cache": "exact"` skips only the
        similar lookup; only deterministic requests are cached unless configured."""
        directives = {d.strip().lower() for d in cache_control.split(",")}
        if self.cache is None or body.cache is False or "no-store" in directives or body.logprobs_count is not None:
            return CachePlan()  # a replay has no logprobs to give
        keyed = KeyedRequest(
            model=model,
            messages=tuple(_keyed_message(msg) for msg in body.messages),
            max_tokens=body.requested_max_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            stop=tuple(body.stop_list),
            seed=body.seed,
            reasoning_effort=body.reasoning_effort,
            namespace=namespace,
            options=body.cache_options(),
            verbatim=body.prompt_text is not None,
        )
        if not is_cacheable(keyed, self.config.mode):
            return CachePlan()
        return CachePlan(
            make_key(keyed, self.config), read="no-cache" not in directives, similar_ok=body.cache != "exact"
        )

    async def lookup(self, plan: CachePlan) -> CachedResponse | None:
        """A stored answer, or the answer of an identical request being generated right now."""
        if plan.key is None or not plan.read or self.cache is None:
            return None
        hit = await self.cache.get(plan.key)
        if hit is not None:
            return hit
        if plan.similar_ok and (similar := await self._similar(plan, plan.key)) is not None:
            return similar
        leader = self.flight.follow(plan.key.digest)
        if leader is None:
            plan.leader = True
            return await self._across_gateways(plan, plan.key)
        shared = await asyncio.shield(leader)  # None when the leader failed: generate on our own
        if shared is not None:
            self.cache.shared_hit()  # served as a hit, so the stats count it as one
        return shared

    async def _similar(self, plan: CachePlan, key: CacheKey) -> CachedResponse | None:
        """After an exact miss, the answer to a similar request (SQLite cache with `cache.similar`)."""
        found = await self.cache.get_similar(key) if isinstance(self.cache, ResponseCache) else None
        if found is None:
            return None
        answer, plan.similar = found
        return answer

    def served(self, plan: CachePlan, caller: str, response_id: str) -> None:
        """A similar hit went out to `caller` as `response_id`: its feedback may name it."""
        similar = self.cache.similar if isinstance(self.cache, ResponseCache) else None
        if plan.pairing is not None and similar is not None:
            similar.served(caller, response_id, plan.pairing)

    def report(
        self, caller: str, response_id: str, source: str | None = None, request: str | None = None
    ) -> tuple[Pairing, bool] | None:
        """A similar hit reported wrong by the id it went out to `caller` as: its pairing is never
        served again (and whether this report was its first). None where no recent hit went out to
        `caller` as that id, or the hit is not of `source` or not for the request whose key is `request`."""
        if not isinstance(self.cache, ResponseCache) or self.cache.similar is None:
            return None
        pairing = self.cache.similar.pairing_of(caller, response_id)
        if pairing is None or source not in (None, pairing.source) or request not in (None, pairing.request):
            return None
        return pairing, self.cache.block(pairing)

    async def _across_gateways(self, plan: CachePlan, key: CacheKey) -> CachedResponse | None:
        """With a shared cache, one gateway generates and the others wait for its answer."""
        if not isinstance(self.cache, RedisResponseCache):
            return None
        if await self.cache.claim(key):
            plan.claimed = True
            return None
        shared = await self.cache.answer_of_another(key)
        if shared is not None:
            self.cache.shared_hit()
            self.flight.finish(key.digest, shared)
            plan.leader = False
        return shared

    def store(self, plan: CachePlan, result: CachedResponse) -> None:
        """Keep a finished answer and share it with followers."""
        if plan.key is None or self.cache is None or result.finish_reason not in ("stop", "length", "tool_calls"):
            return
        if plan.similar is not None:  # another request's answer: stored under this key, feedback could not undo it
            return
        self.cache.put(plan.key, result)
        if plan.leader:
            self.flight.finish(plan.key.digest, result)

    def release(self, plan: CachePlan) -> None:
        """After the request ends in any way, release followers still waiting, here and on the
        other gateways (after the answer is written, so they find it)."""
        if plan.leader and plan.key is not None:
            self.flight.finish(plan.key.digest, None)
        if plan.claimed:
            plan.claimed = False
            if plan.key is not None and isinstance(self.cache, RedisResponseCache):  # only a shared cache claims
                asyncio.ensure_future(self._unclaim(self.cache, plan.key))

    @staticmethod
    async def _unclaim(cache: RedisResponseCache, key: CacheKey) -> None:
        await cache.flush()
        await cache.unclaim(key)


def _keyed_message(message: ChatTurn) -> tuple[str, ...]:
    chat = message.to_chat()
    extra = {
        "tool_calls": [[c.id, c.name, c.arguments] for c in chat.tool_calls],
        "tool_call_id": chat.tool_call_id,
        "name": chat.name,
        "reasoning": chat.reasoning,
    }
    extra = {k: v for k, v in extra.items() if v}
    return (chat.role, chat.content, *([json.dumps(extra, sort_keys=True, ensure_ascii=False)] if extra else []))
