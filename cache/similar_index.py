"""The similar-question index: MinHash LSH over the shingles of each cached request's last user
message, partitioned by everything else the request says. Pure and synchronous; the cache feeds
it (added, dropped, rebuilt at start from the stored canonical requests) and reads the answer.

Partition: the *context digest* is the SHA-256 of the canonical request (cache/keys.py's form)
with the last user message's text blanked, so namespace, model, system prompt, earlier turns,
tools, response format, sampling parameters and max tokens must all be identical before two
requests can meet. Each shingle is salted with that digest, so one LSH holds every partition and
a candidate from another is a chance collision, which the exact context comparison then refuses.
"""

from __future__ import annotations

import hashlib
import json
import sys
from array import array
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from datasketch import MinHash, MinHashLSH

from cache.similar_guards import features, refusal, shingles


@dataclass(slots=True, frozen=True)
class Match:
    digest: str  # the cache key of the answer to reuse
    similarity: float  # Jaccard of the two texts' shingles


@dataclass(slots=True)
class _Entry:
    context: str
    text: str
    hashes: array  # the shingles' hash() values: the exact Jaccard without shingling the text again


def split_canonical(canonical: str) -> tuple[str, str] | None:
    """(context digest, last user text) of a canonical request, or None when the conversation
    does not end with a plain user message (a tool result, say): those never match by similarity."""
    try:
        request = json.loads(canonical)
        last = request["messages"][-1]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    if not isinstance(last, list) or len(last) != 2 or last[0] != "user" or not isinstance(last[1], str):
        return None
    request["messages"][-1] = ["user", ""]
    blanked = json.dumps(request, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(blanked.encode("utf-8")).hexdigest(), last[1]


class SimilarIndex:
    """At most `max_entries` entries (the oldest go first; the cache removes its evicted ones too)."""

    def __init__(
        self, max_entries: int, threshold: float, lsh_threshold: float, num_perm: int = 32, max_candidates: int = 8
    ) -> None:
        self.max_entries = max_entries
        self.threshold = threshold
        self.max_candidates = max_candidates
        self._num_perm = num_perm
        self._lsh_threshold = lsh_threshold
        self._perms = MinHash(num_perm, seed=1).permutations
        self._lsh = MinHashLSH(threshold=lsh_threshold, num_perm=num_perm)
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.refused: Counter[str] = Counter()  # candidates above the threshold a guard refused, by guard

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, digest: str) -> bool:
        return digest in self._entries

    def add(self, digest: str, canonical: str) -> bool:
        """Index one cached request; False when it cannot match (no user text, or only fillers)."""
        split = split_canonical(canonical)
        if split is None:
            return False
        context, text = split
        shingled = shingles(text)
        if not shingled:
            return False
        self.remove(digest)
        self._lsh.insert(digest, self._minhash(context, shingled))
        hashes = array("q", {hash(s) for s in shingled})
        self._entries[digest] = _Entry(sys.intern(context), text, hashes)  # one context string per partition
        while len(self._entries) > self.max_entries:
            self.remove(next(iter(self._entries)))
        return True

    def remove(self, digest: str) -> None:
        if self._entries.pop(digest, None) is not None:
            self._lsh.remove(digest)

    def clear(self) -> None:
        self._entries.clear()
        self._lsh = MinHashLSH(threshold=self._lsh_threshold, num_perm=self._num_perm)

    def text_of(self, digest: str) -> str | None:
        entry = self._entries.get(digest)
        return entry.text if entry is not None else None

    def match(self, canonical: str, skip: Callable[[str], bool] = lambda _: False) -> Match | None:
        """The most similar indexed request in the same partition that every guard lets through,
        or None. `skip(digest)`: candidates not to use (the request's own key, blocked pairings)."""
        scored = self.candidates(canonical, skip)
        split = split_canonical(canonical) if scored else None
        if split is None:  # no candidates (a request that has some always splits)
            return None
        mine = features(split[1])
        for similarity, digest in scored[: self.max_candidates]:
            why = refusal(mine, features(self._entries[digest].text))
            if why is None:
                return Match(digest, round(similarity, 4))
            self.refused[why] += 1
        return None

    def candidates(self, canonical: str, skip: Callable[[str], bool] = lambda _: False) -> list[tuple[float, str]]:
        """(similarity, digest) of the LSH candidates in the same partition at or above the
        threshold, most similar first, before any guard."""
        split = split_canonical(canonical)
        if split is None:
            return []
        context, text = split
        shingled = shingles(text)
        if not shingled:
            return []
        scored = []
        mine = {hash(s) for s in shingled}  # hash() is per process; the index is rebuilt per process too
        for digest in self._lsh.query(self._minhash(context, shingled)):
            entry = self._entries.get(digest)
            if entry is None or entry.context != context or skip(digest):
                continue
            common = len(mine.intersection(entry.hashes))
            similarity = common / (len(mine) + len(entry.hashes) - common)
            if similarity >= self.threshold:
                scored.append((similarity, digest))
        scored.sort(reverse=True)
        return scored

    def _minhash(self, context: str, shingled: set[str]) -> MinHash:
        minhash = MinHash(self._num_perm, seed=1, permutations=self._perms, scheme="affine32")
        salt = context[:16] + "\x1f"
        minhash.update_batch([(salt + s).encode("utf-8") for s in shingled])
        return minhash
