"""What the running limit learned of the engine's pace (its TPOT line, its pace alone, the knee it
found), kept across a restart. A fresh limit starts at `scheduler.limit.initial` (16) and learns
the engine in seconds, but those seconds count: a fresh server stepped from idle to 5x capacity on
llama.cpp (2 cores, where the knee is 7) started 12-15 at once, every high in the first five
seconds missing its first-token promise (0.87-1.45 s) and decoding at 0.17-0.42 s a token. On a GPU
whose knee is far past 16, the same seconds queue work the engine would have run at once."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from scheduler.limit import RECENT, ConcurrencyLimit
from scheduler.tpot_line import TpotLine

Seconds = Annotated[float, Field(ge=0.0)]


class LearnedPace(BaseModel):
    """One engine's learned pace, as stored: checked whole when read back (a file edited by hand or
    cut short is not trusted in part). Built unchecked from the live limit: what the limit holds is
    valid for it, and a save must not fail on it."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    objective_s: Annotated[float, Field(gt=0.0)]
    headroom: Annotated[float, Field(ge=0.0, lt=1.0)]
    on_time_share: Annotated[float, Field(ge=0.0, lt=1.0)]
    limit: Annotated[float, Field(ge=1.0)]
    tpot_s: Seconds | None
    alone: Annotated[list[Seconds], Field(max_length=RECENT)]
    set_point_s: Annotated[float, Field(gt=0.0)]
    spread: Annotated[list[Seconds], Field(max_length=RECENT)]
    line_sums: tuple[Seconds, float, float, Seconds, float, Seconds]

    @model_validator(mode="after")
    def _set_point_under_the_objective(self) -> LearnedPace:
        if self.set_point_s > self.objective_s:
            raise ValueError("set_point_s is over objective_s")
        return self


def remember(limit: ConcurrencyLimit, line: TpotLine) -> LearnedPace:
    return LearnedPace.model_construct(**limit.learned(), line_sums=line.learned())


def recall(pace: LearnedPace, limit: ConcurrencyLimit, line: TpotLine) -> None:
    """The limit and the line back where a run before left them. The limit and its set point only
    where they were learned under the same objective, headroom and trim (the line and the pace
    alone hold for any); the line's readings, not the line it held, so that readings from now on
    replace them within a minute (a line held from a slower spell would cap the limit's growth)."""
    line.relearn(pace.line_sums)
    config = limit.config
    same = (pace.objective_s, pace.headroom, pace.on_time_share) == (
        limit.objective_s,
        config.headroom,
        config.on_time_share,
    )
    limit.relearn(
        pace.limit if same else None,
        pace.tpot_s,
        pace.alone,
        pace.set_point_s if same else None,
        pace.spread,
    )
