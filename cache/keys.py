"""Cache keys: a canonical form of everything that decides a response, and its SHA-256. Pure."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from settings.schema import CacheConfig

_SPACES = re.compile(r"\s+")


@dataclass(slots=True, frozen=True)
class CacheKey:
    digest: str
    canonical: str


@dataclass(slots=True, frozen=True)
class KeyedRequest:
    """The output-deciding parts of a chat request, as the cache sees them."""

    model: str
    messages: tuple[tuple[str, ...], ...]  # (role, text), then a turn's calls or call id as JSON if any
    max_tokens: int | None
    temperature: float | None
    top_p: float | None
    stop: tuple[str, ...]
    seed: int | None
    reasoning_effort: str | None
    namespace: str = ""
    options: str = ""  # canonical JSON of the rest that decides the answer: tools, response format, penalties
    verbatim: bool = False  # never normalized: a text completion's prompt, which is continued as sent


def is_cacheable(request: KeyedRequest, mode: str) -> bool:
    """`deterministic`: temperature 0 or a seed (the same request gives the same answer)."""
    if mode == "all":
        return True
    if mode == "off":
        return False
    return request.temperature == 0 or request.seed is not None


def make_key(
    request: KeyedRequest, config: CacheConfig, digest: Callable[[bytes], str] = lambda b: hashlib.sha256(b).hexdigest()
) -> CacheKey:
    def keyed(text: str) -> str:
        return text if request.verbatim else normalize(text, config)

    messages = [[role, keyed(text), *extra] for role, text, *extra in request.messages]
    options = {"options": request.options} if request.options else {}
    canonical = json.dumps(
        {
            **options,
            "v": 1,
            "namespace": request.namespace,
            "model": request.model,
            "messages": messages,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "stop": list(request.stop),
            "seed": request.seed,
            "reasoning_effort": request.reasoning_effort,
        },
        ensure_ascii=False,
        separators=(",", ":"),
        sort_keys=True,
    )
    return CacheKey(digest(canonical.encode("utf-8")), canonical)


def normalize(text: str, config: CacheConfig) -> str:
    """Off by default: NFC and collapsed whitespace (and case folding, if configured) raise hit
    rates but make prompts that differ only in those ways share an answer."""
    if not config.normalize:
        return text
    text = _SPACES.sub(" ", unicodedata.normalize("NFC", text)).strip()
    return text.casefold() if config.casefold else text


def namespace_for(api_key: str | None, config: CacheConfig) -> str:
    if not config.namespace_by_key:
        return ""
    return "key:" + hashlib.sha256((api_key or "").encode("utf-8")).hexdigest()[:16]
