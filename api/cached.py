"""The response cache on the request path: plan (MISS or BYPASS), lookup with single flight,
write-back of finished answers, and replay of stored ones as JSON or SSE."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import AsyncIterator, Callable

from fastapi.responses import JSONResponse, Response, StreamingResponse

from api.openai_format import SSE_DONE, Completion
from api.schemas import ChatCompletionRequest
from api.services import Services
from cache.keys import CacheKey, KeyedRequest, is_cacheable, make_key, namespace_for
from cache.store import CachedResponse

_PIECES = re.compile(r"\s*\S+|\s+")


@dataclass(slots=True)
class CachePlan:
    key: CacheKey | None = None  # None: the cache is bypassed
    read: bool = False
    leader: bool = False

    @property
    def status(self) -> str:
        return "MISS" if self.key is not None else "BYPASS"


def plan_cache(services: Services, body: ChatCompletionRequest, api_key: str | None,
               cache_control: str = "") -> CachePlan:
    """`Cache-Control: no-store` or `"cache": false` bypass the cache; `no-cache` skips the lookup
    but stores the fresh answer; only deterministic requests are cached unless configured."""
    cache = services.cache
    directives = {d.strip().lower() for d in cache_control.split(",")}
    if cache is None or body.cache is False or "no-store" in directives:
        return CachePlan()
    config = services.config.cache
    keyed = KeyedRequest(
        model=services.engine.capabilities.model,
        messages=tuple((m.role, m.content) for m in (msg.to_chat() for msg in body.messages)),
        max_tokens=body.requested_max_tokens, temperature=body.temperature, top_p=body.top_p,
        stop=tuple(body.stop_list), seed=body.seed, reasoning_effort=body.reasoning_effort,
        namespace=namespace_for(api_key, config),
    )
    if not is_cacheable(keyed, config.mode):
        return CachePlan()
    return CachePlan(make_key(keyed, config), read="no-cache" not in directives)


async def lookup(services: Services, plan: CachePlan) -> CachedResponse | None:
    """A stored answer, or the answer of an identical request being generated right now."""
    if plan.key is None or not plan.read:
        return None
    hit = await services.cache.get(plan.key)
    if hit is not None:
        return hit
    leader = services.flight.follow(plan.key.digest)
    if leader is None:
        plan.leader = True
        return None
    shared = await asyncio.shield(leader)  # None when the leader failed: generate on our own
    if shared is not None:
        services.cache.shared_hit()  # served as X-Cache: HIT, so the stats count it as one
    return shared


def write_back(services: Services, plan: CachePlan) -> tuple[Callable[[Completion], None], Callable[[], None]]:
    """(on_finish, after): store a finished answer and share it with followers; after the request
    ends in any way, release followers still waiting."""

    def on_finish(completion: Completion) -> None:
        if plan.key is None or completion.finish_reason not in ("stop", "length"):
            return
        result = CachedResponse(completion.text, completion.finish_reason, completion.prompt_tokens,
                                completion.completion_tokens)
        services.cache.put(plan.key, result)
        if plan.leader:
            services.flight.finish(plan.key.digest, result)

    def after() -> None:
        if plan.leader:
            services.flight.finish(plan.key.digest, None)

    return on_finish, after


def replay(hit: CachedResponse, completion: Completion, stream: bool, include_usage: bool,
           headers: dict[str, str]) -> Response:
    completion.text, completion.finish_reason = hit.text, hit.finish_reason
    completion.prompt_tokens, completion.completion_tokens = hit.prompt_tokens, hit.completion_tokens
    if not stream:
        return JSONResponse(completion.body(), headers=headers)
    return StreamingResponse(_replay_events(completion, include_usage), media_type="text/event-stream",
                             headers=headers)


async def _replay_events(completion: Completion, include_usage: bool) -> AsyncIterator[str]:
    yield completion.chunk({"role": "assistant", "content": ""}, with_usage_field=include_usage)
    for piece in _PIECES.findall(completion.text):
        yield completion.chunk({"content": piece}, with_usage_field=include_usage)
    yield completion.chunk({}, completion.finish_reason, with_usage_field=include_usage)
    if include_usage:
        yield completion.usage_chunk()
    yield SSE_DONE
