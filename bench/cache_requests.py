"""The requests bench/cache.py and its parts send: one chat body, distinct prompts of one length,
and the cache's own endpoints."""

from __future__ import annotations

from collections.abc import Sequence

from bench.clients import one_connection_client

MAX_TOKENS = 16


def payload(prompt: str) -> dict:
    return {
        "model": "sim",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
    }


def prompt_text(tag: str, i: int) -> str:
    """Distinct prompts of one fixed length, so prompts never differ in hashing or prefill cost."""
    return (
        f"[{tag}-{i:08d}] Summarise in two sentences why a shared GPU needs a priority queue, "
        "and what a response cache saves when scripts repeat the same question."
    )


async def api_json(url: str, method: str, path: str) -> dict:
    async with one_connection_client(url) as client:
        response = await client.request(method, path)
        response.raise_for_status()
        return response.json()


def ms(values_s: Sequence[float]) -> list[float]:
    return [v * 1000 for v in values_s]
