"""Usage figures shared by every gateway on one Redis, so `/v1/usage` and the page show the whole
cluster from any gateway, and a restarted gateway gets its history back. One hash per minute
(field `caller|figure`); each gateway adds what it recorded since the last sync and reads back the
minutes others may still be writing, so a report on any gateway lags the others by one interval.
The lifetime totals behind /metrics stay per gateway: Prometheus scrapes each and sums."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from dataclasses import fields

from redis.asyncio import Redis
from redis.exceptions import RedisError

from pipeline.usage import BUCKET_S, UsageLedger, UsageTotals

log = logging.getLogger("gpt_oss_webui.usage")

PREFIX = "gptoss:usage:"
_FIGURES = [f.name for f in fields(UsageTotals)]
_RECENT_MINUTES = 3  # re-read every sync: others' pushes land in the current minute, late ones just before
_FULL_READ_EVERY = 240  # syncs between reads of every minute kept (a gateway back from an outage pushes late)

PerMinute = dict[int, dict[str, UsageTotals]]


class SharedUsage:
    """A `pipeline.usage.MinuteSink` on Redis; the ledger it syncs into is handed to `run_forever`."""

    def __init__(self, url: str, interval_s: float = 1.0) -> None:
        self.url = url
        self.interval_s = interval_s
        self.errors = 0
        self._redis: Redis | None = None
        self._pending: PerMinute = defaultdict(lambda: defaultdict(UsageTotals))
        self._down = False

    def add(self, minute: int, caller: str, entry: UsageTotals) -> None:
        self._pending[minute][caller].add(entry)

    async def run_forever(self, ledger: UsageLedger) -> None:
        self._redis = Redis.from_url(self.url)
        try:
            syncs = 0
            while True:
                await self.sync(ledger, everything=syncs % _FULL_READ_EVERY == 0)
                syncs += 1
                await asyncio.sleep(self.interval_s)
        finally:
            await self._redis.aclose()

    async def sync(self, ledger: UsageLedger, everything: bool = False) -> None:
        """Push this gateway's additions, then replace the minutes that may have changed with what
        Redis holds (every gateway's) plus what was recorded here meanwhile."""
        pending, self._pending = self._pending, defaultdict(lambda: defaultdict(UsageTotals))
        now = int(ledger.clock() // BUCKET_S)
        try:
            await self._push(pending, ledger.retention_s)
            minutes = await self._kept_minutes() if everything else set(range(now - _RECENT_MINUTES + 1, now + 1))
            read = await self._read(minutes | set(pending))
        except (RedisError, OSError) as exc:
            if not self._down:
                log.warning("shared usage: %s; recording here until Redis answers", exc)
            self.errors += 1
            self._down = True
            for minute, callers in pending.items():  # pushed again next time (an add may count twice)
                for caller, entry in callers.items():
                    self.add(minute, caller, entry)
            return
        if self._down:
            log.warning("shared usage: Redis answers again")
            self._down = False
        for minute, callers in read.items():
            for caller, entry in self._pending.get(minute, {}).items():  # recorded during the sync
                callers.setdefault(caller, UsageTotals()).add(entry)
            ledger.replace_minute(minute, callers)

    async def _push(self, pending: PerMinute, retention_s: float) -> None:
        if not pending:
            return
        async with self._client().pipeline(transaction=False) as pipe:
            for minute, callers in pending.items():
                key = f"{PREFIX}{minute}"
                for caller, entry in callers.items():
                    for figure in _FIGURES:
                        value = getattr(entry, figure)
                        if isinstance(value, float):
                            pipe.hincrbyfloat(key, f"{caller}|{figure}", value)
                        elif value:
                            pipe.hincrby(key, f"{caller}|{figure}", value)
                pipe.expire(key, int(retention_s) + BUCKET_S)
            await pipe.execute()

    async def _kept_minutes(self) -> set[int]:
        return {
            int(key.decode().removeprefix(PREFIX)) async for key in self._client().scan_iter(f"{PREFIX}*", count=1000)
        }

    def _client(self) -> Redis:
        if self._redis is None:
            raise RuntimeError("shared usage is not running")
        return self._redis

    async def _read(self, minutes: set[int]) -> PerMinute:
        ordered = sorted(minutes)
        async with self._client().pipeline(transaction=False) as pipe:
            for minute in ordered:
                pipe.hgetall(f"{PREFIX}{minute}")
            answers = await pipe.execute()
        out: PerMinute = {}
        for minute, fields_ in zip(ordered, answers):
            callers: dict[str, UsageTotals] = defaultdict(UsageTotals)
            for field, value in fields_.items():
                caller, _, figure = field.decode().rpartition("|")
                if figure in _FIGURES:
                    kind = type(getattr(callers[caller], figure))
                    setattr(callers[caller], figure, kind(float(value)))
            out[minute] = dict(callers)
        return out
