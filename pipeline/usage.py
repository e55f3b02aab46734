"""Who used what: per caller, requests, tokens, cache hits, refusals and queue wait, in one-minute
buckets (for any time window) and as lifetime totals (for Prometheus). Names only, never keys.
In memory for a week; the wiring hands in the `MinuteSink`s that keep the minutes beyond this
process (the file on disk, Redis)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Protocol

BUCKET_S = 60
RETENTION_S = 7 * 86_400


@dataclass(slots=True)
class UsageTotals:
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_hits: int = 0
    rejections: int = 0
    queue_wait_s: float = 0.0

    def add(self, other: UsageTotals) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict:
        out = asdict(self)
        out["total_tokens"] = self.prompt_tokens + self.completion_tokens
        out["queue_wait_s"] = round(self.queue_wait_s, 3)
        return out


class MinuteSink(Protocol):
    """Where each recorded entry also goes, by minute (`minute` = unix time // BUCKET_S)."""

    def add(self, minute: int, caller: str, entry: UsageTotals) -> None: ...


class Fanout:
    """Several sinks as one (the file on disk and Redis)."""

    def __init__(self, *sinks: MinuteSink) -> None:
        self.sinks = sinks

    def add(self, minute: int, caller: str, entry: UsageTotals) -> None:
        for sink in self.sinks:
            sink.add(minute, caller, entry)


class UsageLedger:
    def __init__(
        self, clock: Callable[[], float] = time.time, retention_s: float = RETENTION_S, shared: MinuteSink | None = None
    ) -> None:
        self.clock = clock
        self.retention_s = retention_s
        self.shared = shared
        self.lifetime: dict[str, UsageTotals] = defaultdict(UsageTotals)
        self._buckets: dict[int, dict[str, UsageTotals]] = {}

    def record(self, caller: str, entry: UsageTotals) -> None:
        minute = int(self.clock() // BUCKET_S)
        self._bucket(minute)[caller].add(entry)
        self.lifetime[caller].add(entry)
        if self.shared is not None:
            self.shared.add(minute, caller, entry)

    def replace_minute(self, minute: int, callers: dict[str, UsageTotals]) -> None:
        """Every gateway's figures for one minute, as read from the shared store."""
        bucket = self._bucket(minute)
        bucket.clear()
        bucket.update(callers)

    def report(self, start: float, end: float, caller: str | None = None) -> dict[str, UsageTotals]:
        """Totals per caller over [start, end), to the minute."""
        out: dict[str, UsageTotals] = defaultdict(UsageTotals)
        first, last = int(start // BUCKET_S), int(end // BUCKET_S)
        for minute, bucket in self._buckets.items():
            if first <= minute <= last:
                for name, totals in bucket.items():
                    if caller is None or name == caller:
                        out[name].add(totals)
        return dict(sorted(out.items()))

    def rows(self, start: float, end: float) -> list[tuple[int, int, str, UsageTotals]]:
        """(minute start, 60, caller, figures) of the minutes starting in [start, end), oldest first."""
        return [
            (minute * BUCKET_S, BUCKET_S, name, totals)
            for minute, bucket in sorted(self._buckets.items())
            if start <= minute * BUCKET_S < end
            for name, totals in sorted(bucket.items())
        ]

    def _bucket(self, minute: int) -> dict[str, UsageTotals]:
        bucket = self._buckets.get(minute)
        if bucket is None:
            bucket = self._buckets[minute] = defaultdict(UsageTotals)
            self._prune(int(self.clock() // BUCKET_S))
        return bucket

    def _prune(self, minute: int) -> None:
        oldest = minute - int(self.retention_s // BUCKET_S)
        for stale in [m for m in self._buckets if m < oldest]:
            del self._buckets[stale]
