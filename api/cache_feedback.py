"""POST /v1/cache/feedback: a caller reports a similar-question hit as wrong, and that pairing
(this answer for this request) is never served again, across restarts.

The simplest report names the response: `{"request": "<id of the similar hit's response>"}` (the
`id` of the body, or `X-Request-ID`), which this gateway remembers for its last 10,000 similar
hits. A client that kept only the request may send it again instead, with the answer it got:
`{"request": {<the same chat body>}, "cache_source": "<X-Cache-Source>"}`.
"""

from __future__ import annotations

import re

from fastapi import Request

from api.auth import identify
from api.body import read_object, within_bounds
from api.chat import parse_body
from api.deps import services_of
from api.errors import APIError
from cache.similar import Pairing
from cache.store import ResponseCache

_DIGEST = re.compile(r"^[0-9a-f]{64}$")


async def cache_feedback(request: Request) -> dict:
    services = services_of(request)
    caller = identify(request)
    data = await read_object(request)
    cache = services.cache
    if not isinstance(cache, ResponseCache) or cache.similar is None:  # the Redis cache keeps no similar answers
        raise APIError(400, "similar-question answers are not enabled (cache.similar.enabled)", code="invalid_request")
    unknown = sorted(set(data) - {"request", "cache_source"})
    if unknown:
        raise APIError(
            400, f"unrecognized request argument supplied: {unknown[0]}", param=unknown[0], code="unsupported_parameter"
        )
    given, source = data.get("request"), data.get("cache_source")
    if source is not None and not (isinstance(source, str) and _DIGEST.match(source)):
        raise APIError(
            400,
            "cache_source must be the X-Cache-Source of the hit (64 hex digits)",
            param="cache_source",
            code="invalid_value",
        )
    if isinstance(given, str):
        reported = services.pipeline.cache.report(caller.name, given, source)
        if reported is None:
            raise APIError(
                404, f"no recent similar-question answer has the id {given[:140]!r}", param="request", code="not_found"
            )
        pairing, new = reported
    elif isinstance(given, dict):
        pairing, new = await _block_by_body(request, cache, caller.cache_namespace, given, source)
    else:
        raise APIError(
            400,
            "request must be the similar hit's response id, or the chat request body",
            param="request",
            code="invalid_value",
        )
    return {
        "object": "cache.feedback",
        "blocked": True,
        "new": new,
        "cache_source": pairing.source,
        "request_key": pairing.request,
    }


async def _block_by_body(
    request: Request, cache: ResponseCache, namespace: str, given: dict, source: str | None
) -> tuple[Pairing, bool]:
    """A pairing named by the chat request whose answer it served: its cache key, as the cache plans it."""
    if source is None:
        raise APIError(
            400,
            "missing required parameter: 'cache_source' (with a request body)",
            param="cache_source",
            code="missing_required_parameter",
        )
    await within_bounds(request, given)
    body = parse_body(given)
    services = services_of(request)
    plan = services.pipeline.cache.plan(services.engine.capabilities.model, body, namespace)
    if plan.key is None:
        raise APIError(
            400,
            "that request is not cached (not deterministic, or it bypasses the cache)",
            param="request",
            code="invalid_value",
        )
    pairing = Pairing(source, plan.key.digest)
    new = cache.block(pairing)
    return pairing, new
