"""The scheduling mechanism: submit, dispatch into the engine, cancel, expire, shut down.

Policy lives in the pure modules (queue order, admission, pressure, estimates); this module only
carries out their decisions on the asyncio loop and feeds each request's mailbox.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from typing import Callable

from engine.base import EngineBackend, EngineError, EngineRejected
from scheduler.admission import AdmissionController
from scheduler.door import predicted_wait_s, queue_room, wait_refusal
from scheduler.estimate import ArrivalRates, DrainEstimator
from scheduler.caller_share import CallerShare
from scheduler.events import Listener, QueueEvent
from scheduler.fair_share import VirtualTokenCounter
from scheduler.high_demand import HighDemand
from scheduler.limit import ConcurrencyLimit
from scheduler.outcome import Outcome
from scheduler.pace import PrefillWatch, TokenPace
from scheduler.pressure import PressureMonitor
from scheduler.queue import PriorityQueue
from scheduler.request import Dispatched, PriorityClass, Request, RequestState, SchedulerError, Ticket
from settings.schema import SchedulerConfig

log = logging.getLogger("gpt_oss_webui.queue")

_TICK_S = 0.1
_FINISHED_KEPT = 1000
_NO_SLOT_LIMIT = 4096
_MIN_DECODED = 8  # a request's own TPOT says little over fewer tokens


class Scheduler:
    def __init__(
        self, config: SchedulerConfig, engine: EngineBackend, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self.engine = engine
        self.clock = clock
        self.queue = PriorityQueue(config.aging_per_s)
        self.limit = ConcurrencyLimit(config.limit, config.slo.tpot_s, config.max_concurrency or _NO_SLOT_LIMIT)
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
        self._tickets: dict[str, Ticket] = {}
        self._tasks: dict[str, asyncio.Task] = {}
        self._finished: OrderedDict[str, dict] = OrderedDict()
        self._recent_waits: deque[tuple[float, float]] = deque(maxlen=200)
        self._timer: asyncio.Task | None = None
        self.listeners: list[Listener] = []

    async def start(self) -> None:
        caps = self.engine.capabilities
        self.admission.token_budget, self.admission.block_size = caps.token_budget, caps.block_size
        self._set_upper()
        self._timer = asyncio.create_task(self._tick_forever(), name="scheduler-timer")

    async def shutdown(self) -> None:
        """Refuse new work, fail every waiter with 503 and abort what runs in the engine."""
        if self.closed:
            return
        self.closed = True
        for request in self.queue.ranked():
            self.queue.remove(request.request_id)
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
        self._tickets[request.request_id] = ticket
        self.share.joining(request, self.queue)
        self.queue.push(request)
        self.share.joined(request, self.queue)
        self.arrivals.record(request.priority, request.arrival)
        log.debug("enqueue id=%s caller=%s class=%s score=%.2f queued=%d", request.request_id, request.caller,
                  request.priority.value, request.score, len(self.queue))
        self._dispatch()
        self._check_queued_limit(request)
        return ticket

    def _check_queued_limit(self, request: Request) -> None:
        """A caller's `max_queued` counts what still waits once the queue has run what it can."""
        waiting = self.queue.waiting_of(request.caller)
        if request.max_queued is None or request.request_id not in self.queue or waiting <= request.max_queued:
            return
        self.queue.remove(request.request_id)
        self._tickets.pop(request.request_id)
        self._emit(QueueEvent("rejected", request.priority, Outcome.RATE_LIMITED, caller=request.caller))
        log.info("reject id=%s caller=%s class=%s reason=max_queued", request.request_id, request.caller,
                 request.priority.value)
        raise SchedulerError(Outcome.RATE_LIMITED, f"rate limit reached for {request.caller}: at most "
                             f"{request.max_queued} requests waiting at once", self.retry_after_s(request.priority))

    def _set_upper(self) -> None:
        """The running limit never passes `max_concurrency`, or the engine's slots when it is 0."""
        slots = self.engine.capabilities.max_num_seqs if self.engine.ready else 0
        self.limit.set_upper(self.config.max_concurrency or slots or _NO_SLOT_LIMIT)
        self.admission.max_concurrency, self.admission.upper = self.limit.value, self.limit.upper

    def cancel(self, request_id: str) -> None:
        """The client left: drop its request from the queue, or abort it in the engine."""
        ticket = self._tickets.get(request_id)
        if ticket is None:
            return
        if self.queue.remove(request_id) is not None:
            self._fail(ticket.request, SchedulerError(Outcome.DISCONNECT, "the client disconnected"))
            self._dispatch()  # the head may have been what blocked smaller requests
        elif (task := self._tasks.get(request_id)) is not None:
            task.cancel()

    def _check_submittable(self, request: Request) -> None:
        if self.closed:
            raise SchedulerError(Outcome.SHUTDOWN, "the server is shutting down")
        if request.request_id in self._tickets:
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
        self.queue.remove(victim.request_id)
        retry = self.retry_after_s(victim.priority)
        why = "a high-priority request" if victim.priority is not newcomer.priority else "another caller's request"
        self._fail(victim, SchedulerError(Outcome.DISPLACED, f"the queue is full and {why} took this request's "
                                          "place; retry later", retry))

    def _before_response(self, request: Request) -> bool:
        """Whether the client still has no 200: a waiter whose stream opened could not retry a
        429, so it is neither displaced nor timed out; it waits its turn, which aging brings."""
        ticket = self._tickets.get(request.request_id)
        return ticket is None or not ticket.stream_open

    def _dispatch(self) -> None:
        while not self.closed and self.admission.has_any_slot() and (head := self.share.next_up(self.queue)):
            if self.admission.fits(head):
                self.queue.remove(head.request_id)
                self._start(head)
            elif (high := self._high_behind(head)) is not None:
                self.queue.remove(high.request_id)
                self._start(high)
            else:
                return

    def _high_behind(self, head: Request) -> Request | None:
        """When the head must wait, the oldest high request, if the slots kept for high let it run."""
        high = self.queue.oldest(PriorityClass.HIGH)
        if high is None or high is head or not self.share.may_run(high):
            return None
        return high if self.admission.fits(high) else None

    def _start(self, request: Request) -> None:
        now = self.clock()
        wait = now - request.arrival
        request.state, request.dispatched_at = RequestState.RUNNING, now
        request.params.priority = request.priority.rank
        self.admission.admit(request)
        self.share.started(request)
        self._recent_waits.append((now, wait))
        ticket = self._tickets[request.request_id]
        ticket.events.put_nowait(Dispatched(wait))
        self._emit(QueueEvent("admitted", request.priority, caller=request.caller, wait_s=wait))
        if log.isEnabledFor(logging.DEBUG):
            log.debug("dispatch id=%s class=%s score=%.2f wait=%.3fs running=%d", request.request_id,
                      request.priority.value, self.queue.effective_score(request, now), wait, self.admission.running)
        task = asyncio.create_task(self._run(ticket), name=f"run-{request.request_id}")
        self._tasks[request.request_id] = task
        task.add_done_callback(lambda _: self._never_ran(ticket, task))

    async def _run(self, ticket: Ticket) -> None:
        request = ticket.request
        outcome = Outcome.FINISH
        first: float | None = None
        last: float | None = None
        decoded = 0
        batch_mark = self.pace.mark()
        try:
            async for delta in self.engine.generate(request.request_id, request.prompt, request.params):
                ticket.events.put_nowait(delta)
                now = self.clock()
                if first is None:
                    self.prefills.ended(now)
                    first, batch_mark = now, self.pace.mark()
                    self._emit(QueueEvent("first_token", request.priority, caller=request.caller,
                                          elapsed_s=now - request.arrival))
                    if self.admission.first_token(request.request_id):
                        self._dispatch()
                else:
                    stalled = self.prefills.overlaps(last)
                    self.pace.record(now - last, delta.num_tokens, self.admission.running, stalled)
                    decoded += delta.num_tokens
                self.share.served(request.caller, output_tokens=delta.num_tokens)
                last = now
            batch_tpot = self.pace.since(batch_mark)
            if decoded >= _MIN_DECODED and first is not None and last is not None and batch_tpot:
                self.limit.finished((last - first) / decoded, batch_tpot)
            if request.priority is PriorityClass.HIGH and first is not None:
                self.high_demand.finished(first - (request.dispatched_at or first), decoded, self.limit.target_s)
        except asyncio.CancelledError:
            outcome = Outcome.SHUTDOWN if self.closed else Outcome.DISCONNECT
            await self.engine.abort(request.request_id)
            message = "the server is shutting down" if self.closed else "the request was cancelled"
            ticket.events.put_nowait(SchedulerError(outcome, message))
        except EngineRejected as exc:
            outcome = Outcome.ENGINE_REJECTED
            ticket.events.put_nowait(SchedulerError(outcome, str(exc)))
        except EngineError as exc:
            outcome = Outcome.ENGINE_ERROR
            ticket.events.put_nowait(SchedulerError(outcome, f"the engine failed this request: {exc}"))
        except Exception:
            outcome = Outcome.ENGINE_ERROR
            log.exception("engine failure id=%s", request.request_id)
            ticket.events.put_nowait(SchedulerError(outcome, "the engine failed this request"))
        finally:
            self._tasks.pop(request.request_id, None)
            self._release(request)
            self.drain.record(self.clock() - (request.dispatched_at or request.arrival))
            self._finish(request, outcome)
            self._dispatch()

    def _never_ran(self, ticket: Ticket, task: asyncio.Task) -> None:
        """A task cancelled before its first step never enters `_run`, so its cleanup is here."""
        request = ticket.request
        if self._tasks.get(request.request_id) is not task:
            return  # `_run` ran and cleaned up
        self._tasks.pop(request.request_id)
        self._release(request)
        outcome = Outcome.SHUTDOWN if self.closed else Outcome.DISCONNECT
        ticket.events.put_nowait(SchedulerError(outcome, "the request was cancelled"))
        self._finish(request, outcome)
        self._dispatch()

    def _release(self, request: Request) -> None:
        self.admission.release(request.request_id)
        self.share.ended(request)

    def position(self, request_id: str) -> int | None:
        return self.share.position(self.queue, request_id, self.clock())

    def _fail(self, request: Request, error: SchedulerError) -> None:
        ticket = self._tickets.get(request.request_id)
        if ticket is not None:
            ticket.events.put_nowait(error)
        self._finish(request, error.kind)

    def _emit(self, event: QueueEvent) -> None:
        for listener in self.listeners:
            try:
                listener(event)
            except Exception:
                log.exception("queue event listener failed")

    def set_admission_paused(self, paused: bool) -> None:
        """Stop or resume admissions (the memory guard); the queue keeps filling, nothing is dropped."""
        self.admission.paused = paused
        self._dispatch()

    def _finish(self, request: Request, outcome: Outcome) -> None:
        now = self.clock()
        ticket = self._tickets.pop(request.request_id, None)
        request.state = RequestState.FINISHED
        waited = (request.dispatched_at or now) - request.arrival
        self._finished[request.request_id] = {"priority": request.priority.value, "caller": request.caller,
                                               "waited_s": round(waited, 3), "outcome": outcome.value}
        while len(self._finished) > _FINISHED_KEPT:
            self._finished.popitem(last=False)
        log.info("%s id=%s caller=%s class=%s score=%.2f wait=%.3fs total=%.3fs", outcome, request.request_id,
                 request.caller, request.priority.value, request.score, waited, now - request.arrival)
        self._emit(QueueEvent("finished", request.priority, outcome, caller=request.caller, wait_s=waited,
                              elapsed_s=now - request.arrival,
                              was_running=request.dispatched_at is not None,
                              in_stream=ticket is not None and ticket.stream_open))

    async def _tick_forever(self) -> None:
        next_sample = self.clock() + self.config.pressure.interval_s
        next_limit = self.clock() + self.config.limit.interval_s
        while True:
            await asyncio.sleep(_TICK_S)
            self.expire_waiters()
            if self.clock() >= next_sample:
                next_sample = self.clock() + self.config.pressure.interval_s
                self.sample_pressure()
            if self.clock() >= next_limit:
                next_limit = self.clock() + self.config.limit.interval_s
                self.adjust_limit()

    def adjust_limit(self) -> None:
        """One step of the adaptive running limit, from the TPOT measured since the last step."""
        tpot, running = self.pace.take()
        before = self.admission.max_concurrency, self.admission.high_slots
        self.admission.max_concurrency = self.limit.update(tpot, running)
        self.admission.high_slots = self.high_demand.slots(self.arrivals.of(PriorityClass.HIGH, self.clock()))
        if (self.admission.max_concurrency, self.admission.high_slots) != before:
            log.debug("running limit %d -> %d, high slots %d (tpot=%.3fs over %.1f running)", before[0],
                      self.admission.max_concurrency, self.admission.high_slots, tpot or 0.0, running)
            self._dispatch()

    def expire_waiters(self) -> None:
        """Accepted requests keep the limit of their class as configured: emergency mode tightens
        the door for newcomers and drops nothing already waiting. A stream that opened is never
        dropped: accepted means served."""
        now = self.clock()
        for request in self.queue.expired(now, self.accepted_wait_s):
            if not self._before_response(request):
                continue
            self.queue.remove(request.request_id)
            limit = self.accepted_wait_s(request.priority)
            retry = self.retry_after_s(request.priority)
            error = SchedulerError(Outcome.TIMEOUT, f"waited longer than the {request.priority.value}-priority "
                                   f"limit of {limit:g} s in the queue; retry later", retry)
            self._fail(request, error)
        self._dispatch()

    def sample_pressure(self) -> None:
        high = self.queue.count(PriorityClass.HIGH)
        wait = self.recent_wait_s()
        if self.pressure.sample(wait, high):
            state = "enter" if self.pressure.emergency else "leave"
            log.warning("emergency mode %s: avg_wait=%.2fs high_waiting=%d", state, wait, high)

    def max_wait_s(self, priority: PriorityClass) -> float:
        """The wait a newcomer of this class may be promised now."""
        return self.pressure.max_wait_s(priority, self.accepted_wait_s(priority))

    def accepted_wait_s(self, priority: PriorityClass) -> float:
        return self.config.max_wait_s.of(priority.value)

    def retry_after_s(self, priority: PriorityClass) -> int:
        ahead = self.queue.count_ahead_of_new(self.config.weights.of(priority.value), self.clock())
        return self.drain.retry_after_s(ahead, self._parallel())

    def _parallel(self) -> int:
        return self.admission.running or self.admission.max_concurrency

    def recent_wait_s(self) -> float:
        """Mean wait over the last interval: dispatched requests' waits and current waiters' so far."""
        now = self.clock()
        since = now - self.config.pressure.interval_s
        waits = [w for t, w in self._recent_waits if t >= since]
        waits += [now - r.arrival for r in self.queue]
        return sum(waits) / len(waits) if waits else 0.0

    def estimated_wait_s(self, position: int) -> float | None:
        return self.drain.wait_s(position, self._parallel())

    def finished_info(self, request_id: str) -> dict | None:
        return self._finished.get(request_id)

    def ticket(self, request_id: str) -> Ticket | None:
        return self._tickets.get(request_id)

    def update_limits(self, max_concurrency: int | None = None, max_queue_size: int | None = None,
                      low_max_wait_s: float | None = None) -> None:
        """Live changes from operators; nothing queued is dropped when a limit shrinks."""
        if max_concurrency is not None:
            self.config.max_concurrency = max_concurrency
            self._set_upper()
        if max_queue_size is not None:
            self.config.max_queue_size = max_queue_size
        if low_max_wait_s is not None:
            self.config.max_wait_s.low = low_max_wait_s
        log.warning("limits changed: max_concurrency=%d max_queue_size=%d low_max_wait_s=%g",
                    self.config.max_concurrency, self.config.max_queue_size, self.config.max_wait_s.low)
        self._dispatch()
