"""Rate-limit counters shared by several gateways through Redis. The limiter stays local and
synchronous: it adds what it counts here, and reads back the total of every gateway as last
synced plus what it added since. A loop at the edge pushes the additions (one Redis key per
caller, kind and second, or per UTC day) and reads the totals every `interval_s`, so a limit holds
across gateways to within what they admit in one interval, and no request waits on Redis."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from pipeline.rate_limit import DAY_S, WINDOW_S

log = logging.getLogger("gpt_oss_webui.limits")

PREFIX = "gptoss:limits:"
WINDOW = int(WINDOW_S)  # one-second slots in the window
_PER_MINUTE = ("requests", "counts", "tokens")  # summed over the window; "day" per UTC day


class SharedCounts:
    """A `pipeline.rate_limit.SharedTally` on Redis."""

    def __init__(
        self, url: str, names: Iterable[str] = (), interval_s: float = 0.25, clock: Callable[[], float] = time.time
    ) -> None:
        """`names`: callers read from the start (the configured keys); others once they show up."""
        self.url = url
        self.interval_s = interval_s
        self.clock = clock
        self._redis: Redis | None = None
        self._pending: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)  # (name, kind) -> (slot, n)
        self._totals: dict[tuple[str, str], int] = {}
        self._names: set[str] = set(names)
        self.errors = 0
        self._down = False

    def add(self, name: str, kind: str, amount: int) -> None:
        if amount > 0:
            self._names.add(name)
            self._pending[(name, kind)].append((self._slot(kind), amount))

    def used(self, name: str, kind: str, local: int) -> int:
        """Every gateway's count as last synced, plus this one's since; `local` before the first sync."""
        total = self._totals.get((name, kind))
        if total is None:
            return local
        oldest = self._slot(kind) - (0 if kind == "day" else WINDOW - 1)
        return total + sum(n for slot, n in self._pending.get((name, kind), ()) if slot >= oldest)

    async def run_forever(self) -> None:
        self._redis = Redis.from_url(self.url)
        try:
            while True:
                await self.sync()
                await asyncio.sleep(self.interval_s)
        finally:
            await self._redis.aclose()

    async def sync(self) -> None:
        pending, self._pending = self._pending, defaultdict(list)
        try:
            async with self._client().pipeline(transaction=False) as pipe:
                for (name, kind), adds in pending.items():
                    for slot, amount in adds:
                        key = self._key(name, kind, slot)
                        pipe.incrby(key, amount)
                        pipe.expire(key, int(2 * DAY_S) if kind == "day" else 2 * WINDOW)
                await pipe.execute()
                totals = await self._read_totals()
        except (RedisError, OSError) as exc:
            if not self.errors or not self._down:
                log.warning("shared limits: %s; counting here until Redis answers", exc)
            self.errors += 1
            self._down = True
            for name_kind, adds in pending.items():  # pushed again next time (an add may count twice)
                self._pending[name_kind][:0] = adds
            return
        if self._down:
            log.warning("shared limits: Redis answers again")
            self._down = False
        self._totals.update(totals)

    async def _read_totals(self) -> dict[tuple[str, str], int]:
        names = sorted(self._names)
        window = [self._slot("requests") - i for i in range(WINDOW)]
        async with self._client().pipeline(transaction=False) as pipe:
            for name in names:
                for kind in _PER_MINUTE:
                    pipe.mget([self._key(name, kind, s) for s in window])
                pipe.get(self._key(name, "day", self._slot("day")))
            answers = await pipe.execute()
        out: dict[tuple[str, str], int] = {}
        step = len(_PER_MINUTE) + 1
        for i, name in enumerate(names):
            *minutes, day = answers[step * i : step * (i + 1)]
            for kind, counts in zip(_PER_MINUTE, minutes, strict=True):
                out[(name, kind)] = sum(int(v) for v in counts if v)
            out[(name, "day")] = int(day or 0)
        return out

    def _client(self) -> Redis:
        if self._redis is None:
            raise RuntimeError("shared rate-limit counts are not running")
        return self._redis

    def _slot(self, kind: str) -> int:
        return int(self.clock() // (DAY_S if kind == "day" else 1))

    @staticmethod
    def _key(name: str, kind: str, slot: int) -> str:
        return f"{PREFIX}{kind}:{name}:{slot}"
