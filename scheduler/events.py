"""What the scheduler tells listeners (metrics, UI) as requests move, without knowing who listens."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from scheduler.outcome import Outcome
from scheduler.request import PriorityClass

EventKind = Literal["admitted", "first_token", "finished", "rejected"]


@dataclass(slots=True)
class QueueEvent:
    """`outcome`: how a finished request ended, or why a rejected one was refused at submit.
    `in_stream`: the request failed after its stream had opened. Not frozen: a frozen dataclass
    costs twice as much to make, and every request makes several."""

    kind: EventKind
    priority: PriorityClass
    outcome: Outcome | None = None
    caller: str = "anonymous"
    wait_s: float = 0.0
    elapsed_s: float = 0.0
    was_running: bool = False
    in_stream: bool = False


Listener = Callable[[QueueEvent], None]
