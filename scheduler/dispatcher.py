"""The dispatcher: carries out the policy's decisions, taking requests from the queue into the
engine while it says so, and runs each one there (its deltas into its mailbox, its pace into the
measurements, its slot back when it ends)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

from engine.base import EngineError, EngineRejected
from scheduler.events import QueueEvent
from scheduler.ledger import Ledger
from scheduler.outcome import Outcome
from scheduler.policy import SchedulingPolicy
from scheduler.request import Dispatched, PriorityClass, Request, RequestState, SchedulerError, Ticket
from scheduler.state import SchedulerState
from scheduler.takeback import lent_to_take_back, past_pace_to_take_back, to_take_back

log = logging.getLogger("gpt_oss_webui.queue")

_MIN_DECODED = 8  # a request's own TPOT says little over fewer tokens


class Dispatcher:
    def __init__(self, state: SchedulerState, policy: SchedulingPolicy, ledger: Ledger) -> None:
        self.state = state
        self.policy = policy
        self.ledger = ledger

    def dispatch(self) -> None:
        s = self.state
        if s.take_back and s.queue.count(PriorityClass.HIGH):
            self._take_back()
        while (request := self.policy.next_start(s).start) is not None:
            s.queue.remove(request.key)
            self._start(request)
        s.idle_waits.mark(s.clock(), s.queue, s.admission)

    def _start(self, request: Request) -> None:
        s = self.state
        if request.suspended:  # it gave its slot to high and runs on
            self._resume(request)
            return
        now = s.clock()
        wait = now - request.arrival
        request.state, request.dispatched_at = RequestState.RUNNING, now
        request.params.priority = request.priority.rank
        request.lent = s.admission.past_limit(request)
        s.admission.admit(request)
        s.share.started(request)
        s.recent_waits.append((now, wait))
        if not request.background:
            s.starts.record(now)
        ticket = s.tickets[request.key]
        ticket.events.put_nowait(Dispatched(wait))
        if s.listeners:
            self.ledger.emit(QueueEvent("admitted", request.priority, caller=request.caller, wait_s=wait))
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "dispatch id=%s caller=%s class=%s score=%.2f wait=%.3fs running=%d",
                request.request_id,
                request.caller,
                request.priority.value,
                s.queue.effective_score(request, now),
                wait,
                s.admission.running,
            )
        task = asyncio.create_task(self._run(ticket), name=f"run-{request.engine_id}")
        s.tasks[request.key] = task
        task.add_done_callback(lambda _: self._never_ran(ticket, task))

    async def _run(self, ticket: Ticket) -> None:
        request = ticket.request
        outcome = Outcome.FINISH
        try:
            await self._generate(ticket)
        except asyncio.CancelledError:
            outcome, message = self._cancelled(request)
            await self.state.engine.abort(request.engine_id)
            ticket.events.put_nowait(SchedulerError(outcome, message, 0 if outcome is Outcome.YIELDED else None))
        except EngineRejected as exc:
            outcome = Outcome.ENGINE_REJECTED
            ticket.events.put_nowait(SchedulerError(outcome, str(exc)))
        except EngineError as exc:
            outcome = Outcome.ENGINE_ERROR
            ticket.events.put_nowait(SchedulerError(outcome, f"the engine failed this request: {exc}"))
        except Exception:
            outcome = Outcome.ENGINE_ERROR
            log.exception("engine failure id=%s caller=%s", request.request_id, request.caller)
            ticket.events.put_nowait(SchedulerError(outcome, "the engine failed this request"))
        finally:
            self.state.tasks.pop(request.key, None)
            if request.suspended:  # ended while it waited: its slot is back already
                self.state.queue.remove(request.key)
            else:
                self._release(request)
            if not request.background:  # the door's figures are interactive work's
                self.state.drain.record(request.in_engine_s(self.state.clock()))
            self.ledger.finish(request, outcome)
            self.dispatch()

    async def _generate(self, ticket: Ticket) -> None:
        """The engine's deltas into the mailbox; the pace and each class's demand from their times."""
        s, request = self.state, ticket.request
        first: float | None = None
        last: float | None = None
        decoded = resumes = 0
        batch_mark = s.pace.mark()
        async for delta in s.engine.generate(request.engine_id, request.prompt, request.params):
            ticket.events.put_nowait(delta)
            now = s.clock()
            if first is None or request.resumes != resumes:  # a prefill ended: its first token, or a resume's
                s.prefills.ended(now)
                batch_mark, resumes = s.pace.mark(), request.resumes
                if first is None:
                    first = now
                    self.ledger.emit(
                        QueueEvent(
                            "first_token", request.priority, caller=request.caller, elapsed_s=now - request.arrival
                        )
                    )
                if s.admission.first_token(request.key):
                    self.dispatch()
            elif last is not None:  # always, once the first token is in
                s.pace.record(now - last, delta.num_tokens, s.admission.running, s.prefills.overlaps(last))
                decoded += delta.num_tokens
            s.share.served(request.caller, output_tokens=delta.num_tokens)
            last = now
        batch_tpot = s.pace.since(batch_mark)
        # Nobody waits on a batch line's tokens: their spread took the set point from 0.090 to
        # 0.057 s in 110 s of a batch alone, a smaller running limit for the people after it.
        if (
            not request.background
            and decoded >= _MIN_DECODED
            and first is not None
            and last is not None
            and batch_tpot
            and not resumes
        ):
            s.limit.finished((last - first) / decoded, batch_tpot)
        if request.background and first is not None and last is not None and request.dispatched_at is not None:
            s.background.finished(first - request.dispatched_at, last - request.dispatched_at)
        if request.priority is PriorityClass.HIGH and first is not None:
            s.high_demand.finished(first - (request.dispatched_at or first), decoded, s.limit.target_s)

    def _cancelled(self, request: Request) -> tuple[Outcome, str]:
        if self.state.closed:
            return Outcome.SHUTDOWN, "the server is shutting down"
        if request.preempted:
            return Outcome.YIELDED, "this background request gave its slot to interactive work; try it again"
        return Outcome.DISCONNECT, "the request was cancelled"

    def yield_background(self) -> None:
        """Background requests over their share give their slots back, the newest first (they have
        the fewest tokens to lose). Called when an interactive request arrives."""
        s = self.state
        if not s.admission.background_running:
            return
        running = [s.tickets[key].request for key in s.tasks if s.tickets[key].request.background]
        over = sum(not r.preempted for r in running) - s.background_slots()
        newest = sorted((r for r in running if not r.preempted), key=lambda r: r.dispatched_at or 0.0, reverse=True)
        for request in newest[: max(0, over)]:
            request.preempted = True
            s.tasks[request.key].cancel()
        if over > 0:
            log.debug("preempted %d background requests for interactive work", over)

    def _take_back(self) -> None:
        s = self.state
        high = s.queue.oldest(PriorityClass.HIGH)
        if high is None:
            return
        for request in to_take_back(s.admission, high, self._running(), s.share.may_run):
            if not self._suspend(request):
                continue
            if s.admission.fits_in_place(high):  # before any other waiter takes the room
                s.queue.remove(high.key)
                self._start(high)
            return

    def can_take_back_for(self, high: Request) -> bool:
        """Whether a lower request would give `high` its place now (the door then counts no wait)."""
        s = self.state
        return s.take_back and bool(to_take_back(s.admission, high, self._running(), s.share.may_run))

    def take_back_lower(self) -> int:
        """A burst's slots back, once the load proves more than the engine serves on time alone;
        then lower requests' slots while highs run far over the limit past the TPOT objective.
        Returns how many of a burst's came back."""
        s = self.state
        if not s.take_back:
            return 0
        lent = self._give_back(lent_to_take_back(s.admission, self._running()), "slots lent in a burst")
        chosen = past_pace_to_take_back(s.admission, self._running(), s.limit.tpot_s, s.config.slo.tpot_s)
        self._give_back(chosen, "slots from lower requests for highs past the limit")
        return lent

    def _give_back(self, chosen: list[Request], what: str) -> int:
        suspended = [r for r in chosen if self._suspend(r)]
        if suspended:
            log.debug("took back %d %s", len(suspended), what)
            self.dispatch()
        return len(suspended)

    def _running(self) -> Iterator[Request]:
        """Lazily: most dispatches ask nothing of it (no high needs room)."""
        s = self.state
        return (t.request for key in s.tasks if (t := s.tickets.get(key)) and t.request.state is RequestState.RUNNING)

    def _suspend(self, request: Request) -> bool:
        """Out of the engine and back in the queue in its old place, its stream open."""
        s = self.state
        try:
            s.engine.suspend(request.engine_id)
        except EngineError:
            return False  # not in the engine yet, or an answer it could not carry on
        self._release(request)
        request.state, request.suspended, request.suspended_at = RequestState.QUEUED, True, s.clock()
        s.share.joining(request, s.queue)
        s.queue.push(request)
        s.share.joined(request, s.queue)
        s.taken_back += 1
        log.debug("took back the slot of id=%s class=%s", request.request_id, request.priority.value)
        return True

    def _resume(self, request: Request) -> None:
        """Back in the engine; `dispatched_at` stays its first start (its wait, and its age among
        the requests a later high may take a slot from)."""
        s = self.state
        if request.suspended_at is not None:
            request.suspended_s += s.clock() - request.suspended_at
        request.state, request.suspended = RequestState.RUNNING, False
        request.resumes += 1
        request.lent = s.admission.past_limit(request)
        s.admission.admit(request)
        s.share.resumed(request)
        s.engine.resume(request.engine_id)

    def _never_ran(self, ticket: Ticket, task: asyncio.Task) -> None:
        """A task cancelled before its first step never enters `_run`, so its cleanup is here."""
        s, request = self.state, ticket.request
        if s.tasks.get(request.key) is not task:
            return  # `_run` ran and cleaned up
        s.tasks.pop(request.key)
        self._release(request)
        outcome, message = self._cancelled(request)
        ticket.events.put_nowait(SchedulerError(outcome, message, 0 if outcome is Outcome.YIELDED else None))
        self.ledger.finish(request, outcome)
        self.dispatch()

    def _release(self, request: Request) -> None:
        self.state.admission.release(request.key)
        self.state.share.ended(request)
        if not request.background:
            self.state.background.seen_interactive(self.state.clock())
