"""The scheduling mechanism: submit, dispatch into the engine, cancel, expire, shut down.

Policy lives in the pure modules (queue order, admission, pressure, estimates); the mechanism only
carries out their decisions on the asyncio loop and feeds each request's mailbox. `Scheduler` is
here with its state and the door (submit, room, cancel, shut down); the rest is split by concept:
scheduler/dispatch.py (into the engine and running there), scheduler/control.py (the timer:
expire, pressure, limit; live limits), scheduler/bookkeeping.py (outcomes, positions, waits).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from typing import Callable

from engine.base import EngineBackend
from scheduler.admission import AdmissionController
from scheduler.bookkeeping import Bookkeeping
from scheduler.control import NO_SLOT_LIMIT, Control
from scheduler.door import predicted_wait_s, queue_room, wait_refusal
from scheduler.estimate import ArrivalRates, DrainEstimator
from scheduler.caller_share import CallerShare
from scheduler.dispatch import Dispatch
from scheduler.engine_ids import EngineIds
from scheduler.events import Listener, QueueEvent
from scheduler.fair_share import VirtualTokenCounter
from scheduler.high_demand import HighDemand
from scheduler.limit import ConcurrencyLimit
from scheduler.outcome import Outcome
from scheduler.pace import PrefillWatch, TokenPace
from scheduler.pressure import PressureMonitor
from scheduler.queue import PriorityQueue
from scheduler.request import PriorityClass, Request, RequestKey, SchedulerError, Ticket
from settings.schema import SchedulerConfig

log = logging.getLogger("gpt_oss_webui.queue")


class Scheduler(Dispatch, Control, Bookkeeping):
    def __init__(
        self, config: SchedulerConfig, engine: EngineBackend, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self.engine = engine
        self.clock = clock
        self.queue = PriorityQueue(config.aging_per_s)
        self.limit = ConcurrencyLimit(config.limit, config.slo.tpot_s, config.max_concurrency or NO_SLOT_LIMIT)
        self.admission = AdmissionController(self.limit.value, token_budget=0, high_reserve=config.limit.high_reserve,
                                             upper=self.limit.upper)
        self.pressure = PressureMonitor(config.pressure)
        self.drain = DrainEstimator()
        self.arrivals = ArrivalRates()
        self.high_demand = HighDemand()
        self.pace = TokenPace()
        self.prefills = PrefillWatch()
        fair = config.fair_share
        self.share = CallerShare(VirtualTokenCounter(fair.input_weight, fair.output_weight) if fair.enabled else None)
        self.closed = False
        self._tickets: dict[RequestKey, Ticket] = {}  # by caller and id: each caller's ids are its own
        self._tasks: dict[RequestKey, asyncio.Task] = {}
        self._finished: OrderedDict[RequestKey, dict] = OrderedDict()
        self.engine_ids = EngineIds()
        self._recent_waits: deque[tuple[float, float]] = deque(maxlen=200)
        self._timer: asyncio.Task | None = None
        self.listeners: list[Listener] = []

    async def start(self) -> None:
        caps = self.engine.capabilities
        self.admission.token_budget, self.admission.block_size = caps.token_budget, caps.block_size
        self.admission.lower_prefills = self.config.lower_prefills or (1 if caps.serial_prefill else None)
        self._set_upper()
        self._timer = asyncio.create_task(self._tick_forever(), name="scheduler-timer")

    async def shutdown(self) -> None:
        """Refuse new work, fail every waiter with 503 and abort what runs in the engine."""
        if self.closed:
            return
        self.closed = True
        for request in self.queue.ranked():
            self.queue.remove(request.key)
            self._fail(request, SchedulerError(Outcome.SHUTDOWN, "the server is shutting down"))
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if self._timer:
            self._timer.cancel()
            tasks.append(self._timer)
        await asyncio.gather(*tasks, return_exceptions=True)

    def submit(self, request: Request) -> Ticket:
        try:
            self._check_submittable(request)
            request.score = self.pressure.weight(request.priority, request.score)
            request.arrival = self.clock()
            self._check_door(request)
            if len(self.queue) >= queue_room(self.config.max_queue_size, request.priority,
                                             self.config.limit.high_reserve):
                self._make_room(request)
        except SchedulerError as exc:
            if exc.kind is not Outcome.DUPLICATE_ID:
                self._emit(QueueEvent("rejected", request.priority, exc.kind, caller=request.caller))
            raise
        ticket = Ticket(request)
        request.engine_id = self.engine_ids.take(request.request_id)
        self._tickets[request.key] = ticket
        self.share.joining(request, self.queue)
        self.queue.push(request)
        self.share.joined(request, self.queue)
        self.arrivals.record(request.priority, request.arrival)
        if request.priority is PriorityClass.HIGH:
            self.admission.high_traffic = True
        log.debug("enqueue id=%s caller=%s class=%s score=%.2f queued=%d", request.request_id, request.caller,
                  request.priority.value, request.score, len(self.queue))
        self._dispatch()
        self._check_queued_limit(request)
        return ticket

    def _check_queued_limit(self, request: Request) -> None:
        """A caller's `max_queued` counts what still waits once the queue has run what it can."""
        waiting = self.queue.waiting_of(request.caller)
        if request.max_queued is None or request.key not in self.queue or waiting <= request.max_queued:
            return
        self.queue.remove(request.key)
        self._tickets.pop(request.key)
        self.engine_ids.drop(request.engine_id)
        self._emit(QueueEvent("rejected", request.priority, Outcome.RATE_LIMITED, caller=request.caller))
        log.info("reject id=%s caller=%s class=%s reason=max_queued", request.request_id, request.caller,
                 request.priority.value)
        raise SchedulerError(Outcome.RATE_LIMITED, f"rate limit reached for {request.caller}: at most "
                             f"{request.max_queued} requests waiting at once", self.retry_after_s(request.priority))

    def cancel(self, ticket: Ticket) -> None:
        """The client left: drop its request from the queue, or abort it in the engine. Only this
        ticket: once it has ended, its caller may have sent the same id again."""
        key = ticket.key
        if self._tickets.get(key) is not ticket:
            return
        if self.queue.remove(key) is not None:
            self._fail(ticket.request, SchedulerError(Outcome.DISCONNECT, "the client disconnected"))
            self._dispatch()  # the head may have been what blocked smaller requests
        elif (task := self._tasks.get(key)) is not None:
            task.cancel()

    def _check_submittable(self, request: Request) -> None:
        if self.closed:
            raise SchedulerError(Outcome.SHUTDOWN, "the server is shutting down")
        if request.key in self._tickets:  # another caller's live request may have the same id
            raise SchedulerError(Outcome.DUPLICATE_ID, f"request_id {request.request_id!r} is already in progress")
        if not self.admission.can_ever_fit(request):
            raise SchedulerError(
                Outcome.TOO_LARGE,
                f"this request needs up to {self.admission.cost(request)} tokens (prompt + max_tokens) but the engine "
                f"holds at most {self.admission.token_budget}; lower max_tokens or shorten the prompt",
            )

    def _check_door(self, request: Request) -> None:
        limit = self.max_wait_s(request.priority)
        wait = predicted_wait_s(request, self.queue, self.admission, self.drain, self.arrivals, limit,
                                lambda: self.share.ahead_of_new(request, self.queue))
        refusal = wait_refusal(request, wait, limit)
        if refusal is not None:
            log.info("reject id=%s caller=%s class=%s reason=wait_limit predicted_wait=%.1fs", request.request_id,
                     request.caller, request.priority.value, wait)
            raise refusal

    def _make_room(self, newcomer: Request) -> None:
        """A full queue rejects the newcomer, unless it is high and can displace a lower waiter, or
        (fair share) its class's heaviest caller holds more places than its own caller; never a
        waiter whose stream has opened."""
        high = newcomer.priority is PriorityClass.HIGH
        victim = self.queue.newest_below(newcomer.priority, self._before_response) if high else None
        victim = victim or self.share.displaced_by(newcomer, self.queue, self._before_response)
        if victim is None:
            retry = self.retry_after_s(newcomer.priority)
            log.info("reject id=%s caller=%s class=%s reason=queue_full retry_after=%ds", newcomer.request_id,
                     newcomer.caller, newcomer.priority.value, retry)
            raise SchedulerError(Outcome.QUEUE_FULL, f"the queue is full ({len(self.queue)} waiting); retry later",
                                 retry)
        self.queue.remove(victim.key)
        retry = self.retry_after_s(victim.priority)
        why = "a high-priority request" if victim.priority is not newcomer.priority else "another caller's request"
        self._fail(victim, SchedulerError(Outcome.DISPLACED, f"the queue is full and {why} took this request's "
                                          "place; retry later", retry))

    def _before_response(self, request: Request) -> bool:
        """Whether the client still has no 200: a waiter whose stream opened could not retry a
        429, so it is neither displaced nor timed out; it waits its turn, which aging brings."""
        ticket = self._tickets.get(request.key)
        return ticket is None or not ticket.stream_open
