"""The scheduler: the door (submit, room, cancel, shut down) and its public face. It holds one
declared state (scheduler/state.py) and hands the rest on by composition: the policy says what
starts (scheduler/policy.py), the dispatcher carries it out and runs requests in the engine
(scheduler/dispatcher.py), the controller keeps time and the live limits (scheduler/controller.py),
the ledger keeps outcomes and the figures read off the queue (scheduler/ledger.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from engine.base import EngineBackend
from scheduler.admission import AdmissionController
from scheduler.controller import Controller
from scheduler.dispatcher import Dispatcher
from scheduler.door import predicted_wait_s, queue_room, wait_refusal
from scheduler.events import Listener, QueueEvent
from scheduler.learned_pace import LearnedPace
from scheduler.ledger import Ledger
from scheduler.limit import ConcurrencyLimit
from scheduler.outcome import Outcome
from scheduler.policy import SchedulingPolicy, policy_for
from scheduler.pressure import PressureMonitor
from scheduler.queue import PriorityQueue
from scheduler.request import PriorityClass, Request, RequestKey, SchedulerError, Ticket
from scheduler.state import SchedulerState
from settings.schema import SchedulerConfig

log = logging.getLogger("gpt_oss_webui.queue")


class Scheduler:
    def __init__(
        self,
        config: SchedulerConfig,
        engine: EngineBackend,
        clock: Callable[[], float] = time.monotonic,
        policy: SchedulingPolicy | None = None,
    ) -> None:
        self.state = SchedulerState.build(config, engine, clock)
        self.ledger = Ledger(self.state)
        self.dispatcher = Dispatcher(self.state, policy or policy_for(config), self.ledger)
        self.controller = Controller(self.state, self.dispatcher, self.ledger)
        self._timer: asyncio.Task | None = None

    @property
    def config(self) -> SchedulerConfig:
        return self.state.config

    @property
    def engine(self) -> EngineBackend:
        return self.state.engine

    @property
    def clock(self) -> Callable[[], float]:
        return self.state.clock

    @property
    def queue(self) -> PriorityQueue:
        return self.state.queue

    @property
    def admission(self) -> AdmissionController:
        return self.state.admission

    @property
    def limit(self) -> ConcurrencyLimit:
        return self.state.limit

    @property
    def pressure(self) -> PressureMonitor:
        return self.state.pressure

    @property
    def listeners(self) -> list[Listener]:
        return self.state.listeners

    @property
    def closed(self) -> bool:
        return self.state.closed

    async def start(self) -> None:
        s = self.state
        caps = s.engine.capabilities
        s.admission.token_budget, s.admission.block_size = caps.token_budget, caps.block_size
        s.admission.lower_prefills = s.config.lower_prefills or (1 if caps.serial_prefill else None)
        s.admission.batched_prefill = caps.batched_prefill
        s.take_back = caps.resumable and s.config.limit.take_back
        self.controller.set_upper()
        self._timer = asyncio.create_task(self.controller.tick_forever(), name="scheduler-timer")

    async def shutdown(self) -> None:
        """Refuse new work, fail every waiter with 503 and abort what runs in the engine."""
        s = self.state
        if s.closed:
            return
        s.closed = True
        for request in s.queue.ranked():
            if request.suspended:
                continue  # its slot given to high, its task (cancelled below) ends it
            s.queue.remove(request.key)
            self.ledger.fail(request, SchedulerError(Outcome.SHUTDOWN, "the server is shutting down"))
        tasks = list(s.tasks.values())
        for task in tasks:
            task.cancel()
        if self._timer:
            self._timer.cancel()
            tasks.append(self._timer)
        await asyncio.gather(*tasks, return_exceptions=True)

    def submit(self, request: Request) -> Ticket:
        if request.background:
            return self._submit_background(request)
        try:
            self._check_submittable(request)
            if (score := self.state.pressure.boosted(request)) is not None:
                request.score = score
            request.arrival = self.clock()
            self._check_door(request)
            if len(self.queue) >= queue_room(
                self.config.max_queue_size, request.priority, self.config.limit.high_reserve
            ):
                self._make_room(request)
        except SchedulerError as exc:
            if exc.kind is not Outcome.DUPLICATE_ID:
                self.ledger.emit(QueueEvent("rejected", request.priority, exc.kind, caller=request.caller))
            raise
        ticket = self._enqueue(request)
        self.state.arrivals.record(request.priority, request.arrival)
        if request.priority is PriorityClass.HIGH:
            self.admission.high_traffic = True
        if log.isEnabledFor(logging.DEBUG):  # its arguments cost as much as the queue's push
            log.debug(
                "enqueue id=%s caller=%s class=%s score=%.2f queued=%d",
                request.request_id,
                request.caller,
                request.priority.value,
                request.score,
                len(self.queue),
            )
        self.dispatcher.dispatch()
        self.state.background.seen_interactive(request.arrival)
        self.dispatcher.yield_background()
        self._check_queued_limit(request)
        return ticket

    def _submit_background(self, request: Request) -> Ticket:
        """Background work starts at once on idle capacity or not at all (503 `yielded`, tried
        again by its owner): it never waits in the queue in front of anyone, nor passes the door."""
        self._check_submittable(request)
        request.arrival = self.clock()
        self.admission.background_slots = self.state.background_slots()
        if len(self.queue) or not self.admission.fits(request):
            raise SchedulerError(Outcome.YIELDED, "no idle capacity for background work now; try it again", 0)
        ticket = self._enqueue(request)
        self.dispatcher.dispatch()
        if request.key in self.queue:  # its caller's own running limit, or high traffic, holds it back
            self._dequeue(request)
            raise SchedulerError(Outcome.YIELDED, "no idle capacity for background work now; try it again", 0)
        return ticket

    def _enqueue(self, request: Request) -> Ticket:
        ticket = Ticket(request)
        request.engine_id = self.state.engine_ids.take(request.request_id)
        self.state.tickets[request.key] = ticket
        self.state.share.joining(request, self.queue)
        self.queue.push(request)
        self.state.share.joined(request, self.queue)
        return ticket

    def _dequeue(self, request: Request) -> None:
        """Undoes `_enqueue` for a request refused after it: it never was."""
        self.queue.remove(request.key)
        self.state.tickets.pop(request.key)
        self.state.engine_ids.drop(request.engine_id)

    def _check_queued_limit(self, request: Request) -> None:
        """A caller's `max_queued` counts what still waits once the queue has run what it can."""
        waiting = self.queue.waiting_of(request.caller)
        if request.max_queued is None or request.key not in self.queue or waiting <= request.max_queued:
            return
        self._dequeue(request)
        self.ledger.emit(QueueEvent("rejected", request.priority, Outcome.RATE_LIMITED, caller=request.caller))
        log.info(
            "reject id=%s caller=%s class=%s reason=max_queued",
            request.request_id,
            request.caller,
            request.priority.value,
        )
        raise SchedulerError(
            Outcome.RATE_LIMITED,
            f"rate limit reached for {request.caller}: at most {request.max_queued} requests waiting at once",
            self.ledger.retry_after_s(request.priority),
        )

    def cancel(self, ticket: Ticket) -> None:
        """The client left: drop its request from the queue, or abort it in the engine. Only this
        ticket: once it has ended, its caller may have sent the same id again."""
        key = ticket.key
        if self.state.tickets.get(key) is not ticket:
            return
        if (task := self.state.tasks.get(key)) is not None:
            task.cancel()  # running, or waiting with its slot given to high: its run ends it
        elif self.queue.remove(key) is not None:
            self.ledger.fail(ticket.request, SchedulerError(Outcome.DISCONNECT, "the client disconnected"))
            self.dispatcher.dispatch()  # the head may have been what blocked smaller requests

    def _check_submittable(self, request: Request) -> None:
        if self.closed:
            raise SchedulerError(Outcome.SHUTDOWN, "the server is shutting down")
        if request.key in self.state.tickets:  # another caller's live request may have the same id
            raise SchedulerError(Outcome.DUPLICATE_ID, f"request_id {request.request_id!r} is already in progress")
        if not self.admission.can_ever_fit(request):
            raise SchedulerError(
                Outcome.TOO_LARGE,
                f"this request needs up to {self.admission.cost(request)} tokens (prompt + max_tokens) but the engine "
                f"holds at most {self.admission.token_budget}; lower max_tokens or shorten the prompt",
            )

    def _check_door(self, request: Request) -> None:
        limit = self.ledger.max_wait_s(request.priority)
        wait = predicted_wait_s(
            request,
            self.queue,
            self.admission,
            self.state.drain,
            self.state.arrivals,
            limit,
            lambda: self.state.share.ahead_of_new(request, self.queue),
            lambda: self.dispatcher.can_take_back_for(request),
        )
        refusal = wait_refusal(request, wait, limit)
        if refusal is not None:
            log.info(
                "reject id=%s caller=%s class=%s reason=wait_limit predicted_wait=%.1fs",
                request.request_id,
                request.caller,
                request.priority.value,
                wait,
            )
            raise refusal

    def _make_room(self, newcomer: Request) -> None:
        """A full queue rejects the newcomer, unless it is high and can displace a lower waiter, or
        (fair share) its class's heaviest caller holds more places than its own caller; never a
        waiter whose stream has opened."""
        high = newcomer.priority is PriorityClass.HIGH
        victim = self.queue.newest_below(newcomer.priority, self._before_response) if high else None
        victim = victim or self.state.share.displaced_by(newcomer, self.queue, self._before_response)
        if victim is None:
            retry = self.ledger.retry_after_s(newcomer.priority)
            log.info(
                "reject id=%s caller=%s class=%s reason=queue_full retry_after=%ds",
                newcomer.request_id,
                newcomer.caller,
                newcomer.priority.value,
                retry,
            )
            raise SchedulerError(
                Outcome.QUEUE_FULL, f"the queue is full ({len(self.queue)} waiting); retry later", retry
            )
        self.queue.remove(victim.key)
        retry = self.ledger.retry_after_s(victim.priority)
        why = "a high-priority request" if victim.priority is not newcomer.priority else "another caller's request"
        self.ledger.fail(
            victim,
            SchedulerError(
                Outcome.DISPLACED, f"the queue is full and {why} took this request's place; retry later", retry
            ),
        )

    def _before_response(self, request: Request) -> bool:
        return self.state.before_response(request.key)

    # What the rest of the product reads or calls: the ledger's figures and the controller's limits.

    def position(self, key: RequestKey) -> int | None:
        return self.ledger.position(key)

    def ticket(self, key: RequestKey) -> Ticket | None:
        return self.ledger.ticket(key)

    def finished_info(self, key: RequestKey) -> dict | None:
        return self.ledger.finished_info(key)

    def background_room(self) -> int:
        """Background lines (batch lines) the engine may hold now in all, those running included
        (scheduler/background.py). Its user counts its own lines in flight against it, admitted or
        about to be, so it never starts more than fit (each one over would be refused and tried again)."""
        a = self.state.admission
        if len(self.state.queue) or a.paused:
            return 0
        return max(0, min(self.state.background_slots(), a.background_fill() - (a.running - a.background_running)))

    def idle_slots(self) -> int:
        """Slots background work may start on now: the room less the background lines running."""
        return max(0, self.background_room() - self.state.admission.background_running)

    def recent_wait_s(self) -> float:
        return self.ledger.recent_wait_s()

    def estimated_wait_s(self, position: int, priority: PriorityClass) -> float | None:
        return self.ledger.estimated_wait_s(position, priority)

    def retry_after_s(self, priority: PriorityClass) -> int:
        return self.ledger.retry_after_s(priority)

    def max_wait_s(self, priority: PriorityClass) -> float:
        return self.ledger.max_wait_s(priority)

    def expire_waiters(self) -> None:
        self.controller.expire_waiters()

    def sample_pressure(self) -> None:
        self.controller.sample_pressure()

    def adjust_limit(self) -> None:
        self.controller.adjust_limit()

    def learned(self) -> LearnedPace:
        """What the running limit learned of the engine, to keep across a restart."""
        return self.controller.learned()

    def relearn(self, pace: LearnedPace) -> None:
        self.controller.relearn(pace)

    def set_admission_paused(self, paused: bool) -> None:
        self.controller.set_admission_paused(paused)

    def update_limits(
        self, max_concurrency: int | None = None, max_queue_size: int | None = None, low_max_wait_s: float | None = None
    ) -> None:
        self.controller.update_limits(max_concurrency, max_queue_size, low_max_wait_s)
