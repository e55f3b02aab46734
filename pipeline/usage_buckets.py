"""Usage rows as OpenAI's Usage API answers them (`/v1/organization/usage/completions`): time
buckets of a chosen width, each with results grouped by key and model. Pure. Past two days the
file keeps hours, not minutes: an hour's figures then fall in the one-minute bucket it starts."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from pipeline.usage import UsageTotals

WIDTHS = {"1m": 60, "1h": 3600, "1d": 86_400}
LIMITS = {"1m": (60, 1440), "1h": (24, 168), "1d": (7, 31)}  # (default, most) buckets per page, as OpenAI's
GROUPS = ("api_key_id", "model")

Row = tuple[int, int, str, UsageTotals]


@dataclass(frozen=True, slots=True)
class Page:
    buckets: list[dict]
    next_start: int | None  # where the next page starts; None: this is the last


def page(rows: list[Row], start: int, end: int, width: str, limit: int, group_by: tuple[str, ...], model: str) -> Page:
    step = WIDTHS[width]
    first = start // step * step
    edges = range(first, min(end, first + (limit + 1) * step), step)  # one past the page: are there more?
    shown, more = list(edges[:limit]), len(edges) > limit
    sums: dict[int, dict[tuple[str | None, str | None], UsageTotals]] = defaultdict(lambda: defaultdict(UsageTotals))
    for row_start, _, caller, totals in rows:
        bucket = row_start // step * step
        if shown and shown[0] <= bucket <= shown[-1]:
            key = (caller if "api_key_id" in group_by else None, model if "model" in group_by else None)
            sums[bucket][key].add(totals)
    buckets = [
        {
            "object": "bucket",
            "start_time": edge,
            "end_time": min(edge + step, end),
            "results": [_result(totals, key) for key, totals in sorted(sums[edge].items(), key=str)],
        }
        for edge in shown
    ]
    return Page(buckets, shown[-1] + step if more else None)


def _result(totals: UsageTotals, key: tuple[str | None, str | None]) -> dict:
    return {
        "object": "organization.usage.completions.result",
        "input_tokens": totals.prompt_tokens,
        "output_tokens": totals.completion_tokens,
        "input_cached_tokens": 0,
        "input_audio_tokens": 0,
        "output_audio_tokens": 0,
        "num_model_requests": totals.requests - totals.rejections,
        "project_id": None,
        "user_id": None,
        "api_key_id": key[0],
        "model": key[1],
        "batch": None,
    }
