"""Lent slots taken back for high: which running lower request gives its slot up now.

High runs over the running limit when it must, and lower requests never fill the engine's last
`high_reserve` share of slots, so a high rarely finds no slot. Where it does (an engine of few
slots, or memory held by long lower requests), or highs are at their share with lower requests
running beside them (the batch keeps its size), the newest lower request is suspended for it: the
engine drops its sequence, its stream stays open, it waits in the queue in its old place (notices
every second) and resumes where it stopped, its answer so far prefilled again. The newest: the
least to prefill again, the most of the slot's time to give back. Only requests whose sampling the
engine can carry on from plain text: no schema or tool constraint (its grammar's state would be
lost), no stop string, no batch line (those yield and run again). The high starts at once in the
room given up, before any other waiter can take it.

A burst's slots come back the same way. While the engine alone would serve the load on time,
lower requests start past the running limit (scheduler/demand.py); a burst and the first seconds of
a step to several times capacity look alike. When the load proves to be the second (the mean
demand or the burst passes what the engine serves on time), the lower requests started past the
limit and still over it are suspended, newest first: on vLLM's CPU build a step from idle to 3x
and 5x otherwise kept 34-45 lows decoding for their whole answers beside the highs, every
sequence's TPOT at 1.2-2x the objective, and the limit, cut for it, then held highs behind highs.

Not while high traffic merely fills the running limit: measured so on vLLM's CPU build, the
highs decoded faster but waited as long (the running limit sets how many run), and every suspended
low, late once it resumed, was an on-time answer lost (docs/BENCHMARKS.md, "Taking a lent slot
back").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from scheduler.admission import AdmissionController
from scheduler.request import PriorityClass, Request

_FAR_OVER = 1.25  # running over this many times the limit, past the objective: highs pushed it there


def resumable(request: Request) -> bool:
    """Stop strings too: an engine holds back text that may begin one, and a suspension would drop it.
    Nor a text completion: its tokens must be the model's own, and llama.cpp would take the text so
    far back as text, tokenized anew (its count of held-back bytes off too)."""
    return (
        request.priority is not PriorityClass.HIGH
        and not request.background
        and request.params.structured is None
        and request.params.tools is None
        and not request.params.stop
        and not request.params.raw
    )


def to_take_back(
    admission: AdmissionController, high: Request, running: Iterable[Request], may_run: Callable[[Request], bool]
) -> list[Request]:
    """The lower requests that could give their slot to `high` (the oldest waiting), newest (by
    first start) first: only when it waits for a slot or memory alone, or for its class's share
    (`high_needs_room`; its caller's own running limit lets it run), and one of them gives it enough."""
    if not may_run(high) or not admission.high_needs_room(high):
        return []
    lower = (r for r in running if resumable(r) and admission.fits_without(high, r))
    return sorted(lower, key=lambda r: r.dispatched_at or 0.0, reverse=True)


def lent_to_take_back(admission: AdmissionController, running: Iterable[Request]) -> list[Request]:
    """The requests started past the running limit in a burst that give their slots back now the
    engine is no longer serving the load on time alone: as many as the running count is over the
    lower classes' limit, newest (by first start) first."""
    if admission.unbounded:
        return []
    over = admission.running - admission.slots_for(PriorityClass.LOW)
    lent = sorted((r for r in running if r.lent and resumable(r)), key=lambda r: r.dispatched_at or 0.0, reverse=True)
    return lent[: max(0, over)]


def past_pace_to_take_back(
    admission: AdmissionController, running: Iterable[Request], tpot_s: float | None, objective_s: float
) -> list[Request]:
    """The lower requests that give their slots back while highs have pushed the engine far over
    the running limit (`_FAR_OVER`) and TPOT past the objective, or highs alone run past it (a
    burst of them, scheduler/controller.py): as many as the running count is over the limit,
    newest (by first start) first. A step from quiet to 5x capacity starts lows under the limit
    before the highs come, the highs then run over it, and on vLLM's CPU build 19-22 of the first
    27 highs decoded past the objective beside them (2-5 on time); with bursts of highs, 6-8 lows
    beside 20-41 highs left 21 of 80 highs at 0.101-0.130 s a token. Not while highs merely fill
    the limit: suspended lows resume late, and that lost more lows than it gained highs
    (docs/BENCHMARKS.md, "Taking a lent slot back"). Nor for a burst on llama.cpp, whose highs
    do not burst and where a resumed low prefills again on the threads every sequence decodes on."""
    if admission.unbounded or not admission.high_running:
        return []
    slow = tpot_s is not None and tpot_s > objective_s and admission.running > _FAR_OVER * admission.max_concurrency
    burst = admission.batched_prefill and admission.high_running > admission.max_concurrency
    if not (slow or burst):
        return []
    over = admission.running - admission.max_concurrency
    lower = sorted((r for r in running if resumable(r)), key=lambda r: r.dispatched_at or 0.0, reverse=True)
    return lower[:over]
