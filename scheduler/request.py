"""A request as the scheduler sees it: who it is, how urgent, how much engine it needs."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from core.types import GenParams, Prompt
from scheduler.outcome import Outcome


class PriorityClass(str, Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"

    @property
    def rank(self) -> int:
        """0 for high: the order vLLM's priority policy expects (lower runs first)."""
        return _RANKS[self]


_RANKS = {PriorityClass.HIGH: 0, PriorityClass.MEDIUM: 1, PriorityClass.LOW: 2}


class RequestKey(NamedTuple):
    """A request in the scheduler's index. A client's id is its own: two callers may use the same
    one at once, and a lookup by another caller's name finds nothing."""

    caller: str
    request_id: str


class RequestState(Enum):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(slots=True, eq=False, kw_only=True)
class Request:
    request_id: str
    priority: PriorityClass
    score: float
    prompt: Prompt
    params: GenParams
    caller: str = "anonymous"  # the caller's name (never its API key): logs, status, and the index's namespace
    max_parallel: int | None = None  # the caller's running limit: more of its requests wait
    max_queued: int | None = None  # how many of the caller's requests may wait
    arrival: float = 0.0
    state: RequestState = RequestState.QUEUED
    dispatched_at: float | None = None
    engine_id: str = ""  # the id the engine runs it under, unique among live requests; the scheduler sets it
    background: bool = False  # a batch line: runs only on capacity interactive work leaves (scheduler/background.py)
    preempted: bool = False  # background work told to give its slot back
    boosted: bool = False  # its score carries emergency mode's boost for high (scheduler/pressure.py)
    suspended: bool = False  # gave its slot back and waits, its stream open (scheduler/takeback.py)
    resumes: int = 0  # times it came back to the engine after that
    suspended_at: float | None = None  # when it last gave its slot back
    suspended_s: float = 0.0  # time spent waiting with its slot given back, before the last resume
    lent: bool = False  # started past the running limit in a burst (scheduler/takeback.py)
    key: RequestKey = field(init=False, repr=False)  # (caller, request_id): both fixed at creation

    def __post_init__(self) -> None:
        self.key = RequestKey(self.caller, self.request_id)

    def in_engine_s(self, now: float) -> float:
        """Time it has held a slot since its first start, its suspended waits left out: a low
        suspended at 3x capacity for 20 s counted as 20 s of service made the door read the
        engine's drain at half its rate and refuse highs that would have started in time."""
        started = self.dispatched_at if self.dispatched_at is not None else self.arrival
        waiting = now - self.suspended_at if self.suspended and self.suspended_at is not None else 0.0
        return now - started - self.suspended_s - waiting

    @property
    def cost_tokens(self) -> int:
        """Engine memory the request may need at most: its prompt plus every token it may generate."""
        return self.prompt.num_tokens + self.params.max_tokens


@dataclass(slots=True)
class Dispatched:
    """Sent to the request's mailbox when it leaves the queue for the engine."""

    queue_wait_s: float


class SchedulerError(Exception):
    """Why the scheduler could not serve a request; the pipeline maps `kind` to a status."""

    def __init__(self, kind: Outcome, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retry_after_s = retry_after_s


class Mailbox:
    """A request's events, for one reader; `put_nowait` never blocks. An empty wait is one future
    and, with a timeout, one timer: asyncio.Queue's `get` under a timeout took a task and a wait
    per event, and a stream reads one event per token."""

    def __init__(self) -> None:
        self._items: deque[object] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: object) -> None:
        self._items.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def empty(self) -> bool:
        return not self._items

    async def get(self) -> object:
        while not self._items:
            await self.wait(None)
        return self._items.popleft()

    async def wait(self, timeout: float | None) -> None:
        """Until an event is in or `timeout` has passed."""
        if self._items:
            return
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(timeout, _wake, waiter) if timeout is not None else None
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def take(self) -> object | None:
        return self._items.popleft() if self._items else None


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


@dataclass(slots=True, eq=False)
class Ticket:
    """A submitted request and its own mailbox: put never blocks, so a slow client cannot stall
    the scheduling loop; errors travel through the same mailbox."""

    request: Request
    events: Mailbox = field(default_factory=Mailbox)
    stream_open: bool = False  # the client already has a 200: a failure can only be told in-band

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def key(self) -> RequestKey:
        return self.request.key

    async def next_event(self, timeout: float | None = None) -> object | None:
        """The next event, or None after `timeout`; a timed-out wait never loses an event."""
        await self.events.wait(timeout)
        return self.events.take()
