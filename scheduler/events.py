"""What the scheduler tells listeners (metrics, UI) as requests move, without knowing who listens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

from scheduler.request import PriorityClass

EventKind = Literal["admitted", "first_token", "finished", "rejected"]


@dataclass(slots=True, frozen=True)
class QueueEvent:
    """`outcome`: for finished, one of finish, disconnect, timeout, displaced, shutdown, engine_error;
    for rejected (refused at submit), queue_full, wait_limit, too_large or shutdown. `in_stream`:
    the request failed after its stream had opened."""

    kind: EventKind
    priority: PriorityClass
    outcome: str = ""
    wait_s: float = 0.0
    elapsed_s: float = 0.0
    was_running: bool = False
    in_stream: bool = False


Listener = Callable[[QueueEvent], None]
