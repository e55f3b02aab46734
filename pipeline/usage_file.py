"""The usage ledger on disk: per caller, per minute, in one SQLite file, so a restart or a crash
keeps the figures and the quotas counted from them. Entries are buffered and written once a
second off the request path (no request waits on the disk); a `kill -9` loses at most that
second. Minutes older than two days are rolled up into hours, and rows past the retention go, so
the file stays within a bound (about 24 x 90 rows per caller for 90 days)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import astuple, fields
from pathlib import Path

from core.sqlite_file import SqliteFile, schema
from pipeline.rate_limit import DAY_S, RateLimiter
from pipeline.usage import BUCKET_S, UsageLedger, UsageTotals

log = logging.getLogger("gpt_oss_webui.usage")

HOUR_S = 3600
ROLL_UP_AFTER_S = 2 * 86_400  # minutes this old become hours
_FIGURES = [f.name for f in fields(UsageTotals)]
_SCHEMA = (
    f"""CREATE TABLE IF NOT EXISTS usage (start INTEGER NOT NULL, width INTEGER NOT NULL, caller TEXT NOT NULL,
    {", ".join(f"{f} REAL NOT NULL DEFAULT 0" for f in _FIGURES)}, PRIMARY KEY (start, width, caller))""",
    "CREATE INDEX IF NOT EXISTS usage_by_start ON usage (start)",
)
_UPSERT = (
    f"INSERT INTO usage (start, width, caller, {', '.join(_FIGURES)}) VALUES (?, ?, ?, "
    f"{', '.join('?' * len(_FIGURES))}) ON CONFLICT (start, width, caller) DO UPDATE SET "
    + ", ".join(f"{f} = {f} + excluded.{f}" for f in _FIGURES)
)
_MAINTAIN_EVERY_S = 600.0

Row = tuple[int, int, str, UsageTotals]  # start (unix s), width (s), caller, figures


class UsageFile:
    """A `pipeline.usage.MinuteSink` on SQLite."""

    def __init__(
        self, path: str, retention_s: float, flush_s: float = 1.0, clock: Callable[[], float] = time.time
    ) -> None:
        self.retention_s, self.flush_s, self.clock = retention_s, flush_s, clock
        self.path = Path(path)
        self._file = SqliteFile(self.path, "the usage file", log, clock)
        self._pending: dict[tuple[int, str], UsageTotals] = defaultdict(UsageTotals)
        self._maintained = 0.0

    def add(self, minute: int, caller: str, entry: UsageTotals) -> None:
        self._pending[(minute, caller)].add(entry)

    async def open(self) -> None:
        await self._file.open(schema(*_SCHEMA))

    async def close(self) -> None:
        if self._file.is_open:
            await self.flush()
            await self._file.close()

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(self.flush_s)
            try:
                await self.flush()
                if self.clock() - self._maintained > _MAINTAIN_EVERY_S:
                    await self.maintain()
            except Exception:
                log.exception("writing usage failed; kept for the next try")

    async def flush(self) -> None:
        pending, self._pending = self._pending, defaultdict(UsageTotals)
        if not pending:
            return
        rows = [(minute * BUCKET_S, BUCKET_S, caller, *astuple(entry)) for (minute, caller), entry in pending.items()]
        try:
            async with self._file.transaction() as db:
                await db.executemany(_UPSERT, rows)
        except BaseException:
            for key, entry in pending.items():  # written next time
                self._pending[key].add(entry)
            raise

    async def maintain(self) -> None:
        """Minutes past two days rolled up into hours; rows past the retention removed."""
        self._maintained = now = self.clock()
        hour_edge = int((now - ROLL_UP_AFTER_S) // HOUR_S * HOUR_S)
        sums = ", ".join(f"SUM({f})" for f in _FIGURES)
        async with self._file.transaction() as db:
            await db.execute(
                f"INSERT INTO usage (start, width, caller, {', '.join(_FIGURES)}) "
                f"SELECT start / {HOUR_S} * {HOUR_S}, {HOUR_S}, caller, {sums} FROM usage "
                f"WHERE width = {BUCKET_S} AND start < ? GROUP BY start / {HOUR_S}, caller "
                f"ON CONFLICT (start, width, caller) DO UPDATE SET "
                + ", ".join(f"{f} = {f} + excluded.{f}" for f in _FIGURES),
                (hour_edge,),
            )
            await db.execute(f"DELETE FROM usage WHERE width = {BUCKET_S} AND start < ?", (hour_edge,))
            await db.execute("DELETE FROM usage WHERE start < ?", (now - self.retention_s,))

    async def rows(self, start: float, end: float, caller: str | None = None) -> list[Row]:
        """Every row starting in [start, end), oldest first."""
        query = f"SELECT start, width, caller, {', '.join(_FIGURES)} FROM usage WHERE start >= ? AND start < ?"
        args: list[object] = [int(start), int(end)]
        if caller is not None:
            query, args = query + " AND caller = ?", [*args, caller]
        async with self._file.connected().execute(query + " ORDER BY start", args) as cur:
            return [(row[0], row[1], row[2], _totals(row[3:])) async for row in cur]

    async def report(self, start: float, end: float, caller: str | None = None) -> dict[str, UsageTotals]:
        out: dict[str, UsageTotals] = defaultdict(UsageTotals)
        for _, _, name, totals in await self.rows(start, end, caller):
            out[name].add(totals)
        return dict(sorted(out.items()))

    async def load_into(self, ledger: UsageLedger) -> None:
        """The minutes the ledger keeps in memory, read back after a restart."""
        now = self.clock()
        minutes: dict[int, dict[str, UsageTotals]] = defaultdict(dict)
        for start, width, caller, totals in await self.rows(now - ledger.retention_s, now + BUCKET_S):
            if width == BUCKET_S:
                minutes[start // BUCKET_S][caller] = totals
        for minute, callers in minutes.items():
            ledger.replace_minute(minute, callers)


async def usage_rows(ledger: UsageLedger, file: UsageFile | None, start: float, end: float) -> list[Row]:
    """Rows over [start, end): the last week from the ledger in memory (up to the second), older
    ones from the file."""
    horizon = int(ledger.clock() - ledger.retention_s) // BUCKET_S * BUCKET_S
    older = await file.rows(start, min(end, horizon)) if file is not None and start < horizon else []
    return older + ledger.rows(max(start, horizon), end)


async def restore(file: UsageFile, ledger: UsageLedger, limiter: RateLimiter) -> None:
    """After a start: the ledger's week of minutes, each caller's tokens today against its daily
    quota, and its last two minutes against `rpm` / `tpm` (placed as late as they could have been,
    so a window is never undercounted)."""
    await file.load_into(ledger)
    now = file.clock()
    today = now // DAY_S * DAY_S
    spent: dict[str, int] = defaultdict(int)
    recent: dict[str, list[tuple[float, int, int]]] = defaultdict(list)
    for start, width, caller, totals in await file.rows(min(today, now - 2 * BUCKET_S), now + BUCKET_S):
        tokens = totals.prompt_tokens + totals.completion_tokens
        if start >= today:
            spent[caller] += tokens
        if start >= now - 2 * BUCKET_S:
            recent[caller].append((min(now, start + width), totals.requests, tokens))
    for caller in spent.keys() | recent.keys():
        limiter.restore(caller, spent[caller], recent[caller])
    if spent:
        log.info("usage restored from %s: %d callers used tokens today", file.path, len(spent))


def _totals(values: tuple) -> UsageTotals:
    totals = UsageTotals()
    for name, value in zip(_FIGURES, values):
        setattr(totals, name, type(getattr(totals, name))(value))  # SQLite REAL back to each figure's type
    return totals
