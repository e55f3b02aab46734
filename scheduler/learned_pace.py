"""What the running limit learned of the engine's pace (its TPOT line, its pace alone, the knee it
found), kept across a restart. A fresh limit starts at `scheduler.limit.initial` (16) and learns
the engine in seconds, but those seconds count: a fresh server stepped from idle to 5x capacity on
llama.cpp (2 cores, where the knee is 7) started 12-15 at once, every high in the first five
seconds missing its first-token promise (0.87-1.45 s) and decoding at 0.17-0.42 s a token. On a GPU
whose knee is far past 16, the same seconds queue work the engine would have run at once."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from scheduler.limit import ConcurrencyLimit
from scheduler.tpot_line import TpotLine

Seconds = Annotated[float, Field(ge=0.0, le=3600.0)]


class LearnedPace(BaseModel):
    """One engine's learned pace, as stored: checked whole when read back (a file edited by hand or
    cut short is not trusted in part)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    objective_s: Annotated[float, Field(gt=0.0, le=3600.0)]
    limit: Annotated[float, Field(ge=1.0, le=1 << 20)]
    tpot_s: Seconds | None
    alone: Annotated[list[Seconds], Field(max_length=64)]
    set_point_s: Annotated[float, Field(gt=0.0, le=3600.0)]
    spread: Annotated[list[Annotated[float, Field(ge=0.0, le=1e6)]], Field(max_length=1024)]
    line_sums: tuple[float, float, float, float, float, float]
    line_held: tuple[float, float] | None


def remember(limit: ConcurrencyLimit, line: TpotLine) -> LearnedPace:
    sums, held = line.learned()
    return LearnedPace(**limit.learned(), line_sums=sums, line_held=held)


def recall(pace: LearnedPace, limit: ConcurrencyLimit, line: TpotLine) -> None:
    """The limit and the line back where a run before left them; the limit and its set point only
    where the objective is the one they were learned for (the line and the pace alone hold for any)."""
    line.relearn(pace.line_sums, pace.line_held)
    same_objective = abs(pace.objective_s - limit.objective_s) < 1e-9
    limit.relearn(
        pace.limit if same_objective else None,
        pace.tpot_s,
        pace.alone,
        pace.set_point_s if same_objective else None,
        pace.spread,
    )
