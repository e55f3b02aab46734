"""Similar-question answers over the SQLite response cache: the index kept in step with the
cache's entries (added, evicted, expired, cleared, rebuilt at start), the pairings reported wrong
(never served again), and the counters the stats and metrics show. Synchronous; the cache does
the I/O (it reads the answer, and writes blocks through its one writer)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from cache.keys import CacheKey
from cache.similar_index import Match, SimilarIndex
from settings.schema import SimilarCacheConfig

SERVED_KEPT = 10_000  # recent similar hits whose response id feedback may name


@dataclass(slots=True, frozen=True)
class Pairing:
    """A similar hit: the answer of `source` served to the request whose key is `request`."""

    source: str
    request: str


class SimilarAnswers:
    def __init__(self, config: SimilarCacheConfig, max_entries: int) -> None:
        self.config = config
        self.index = SimilarIndex(
            max_entries,
            config.threshold,
            min(config.lsh_threshold, config.threshold),
            config.num_perm,
            config.max_candidates,
        )
        self._blocked: set[Pairing] = set()
        self._served: OrderedDict[tuple[str, str], Pairing] = OrderedDict()
        self.hits = 0
        self.false_hits = 0  # pairings reported wrong

    # kept in step by the cache
    def rebuild(self, rows: Iterable[tuple[str, str]]) -> None:
        self.index.clear()
        for digest, canonical in rows:
            self.index.add(digest, canonical)

    def added(self, digest: str, canonical: str) -> None:
        self.index.add(digest, canonical)

    def dropped(self, digest: str) -> None:
        self.index.remove(digest)

    def load_blocks(self, rows: Iterable[tuple[str, str]]) -> None:
        self._blocked = {Pairing(source, request) for source, request in rows}

    # the request path
    def find(self, key: CacheKey) -> Match | None:
        """The most similar stored request that no guard refuses and no report blocked."""
        return self.index.match(
            key.canonical, skip=lambda digest: digest == key.digest or Pairing(digest, key.digest) in self._blocked
        )

    def served(self, caller: str, response_id: str, pairing: Pairing) -> None:
        """Remember which pairing answered `caller`'s `response_id`, so its feedback may name just
        the id. Per caller: a client picks its own ids, and another's report must not reach it."""
        self._served[caller, response_id] = pairing
        self._served.move_to_end((caller, response_id))
        while len(self._served) > SERVED_KEPT:
            self._served.popitem(last=False)

    def pairing_of(self, caller: str, response_id: str) -> Pairing | None:
        return self._served.get((caller, response_id))

    def block(self, pairing: Pairing) -> bool:
        """True when the pairing was not blocked before (a repeated report counts once)."""
        if pairing in self._blocked:
            return False
        self._blocked.add(pairing)
        self.false_hits += 1
        return True

    def is_blocked(self, pairing: Pairing) -> bool:
        return pairing in self._blocked

    def stats(self) -> dict[str, object]:
        return {
            "enabled": True,
            "hits": self.hits,
            "false_hit_reports": self.false_hits,
            "blocked_pairings": len(self._blocked),
            "indexed": len(self.index),
            "threshold": self.config.threshold,
            "refused_by_guard": dict(self.index.refused),
        }
