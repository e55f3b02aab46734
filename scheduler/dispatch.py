"""Dispatch: taking requests from the queue into the engine while slots and tokens allow, and
running each one there (its deltas into its mailbox, its pace into the measurements, its slot back
when it ends). Mixed into `scheduler.loop.Scheduler`, which owns the state."""

from __future__ import annotations

import asyncio
import logging

from engine.base import EngineError, EngineRejected
from scheduler.events import QueueEvent
from scheduler.outcome import Outcome
from scheduler.request import Dispatched, PriorityClass, Request, RequestState, SchedulerError, Ticket

log = logging.getLogger("gpt_oss_webui.queue")

_MIN_DECODED = 8  # a request's own TPOT says little over fewer tokens


class Dispatch:
    def _dispatch(self) -> None:
        while not self.closed and self.admission.has_any_slot() and (head := self.share.next_up(self.queue)):
            if self.admission.fits(head):
                self.queue.remove(head.key)
                self._start(head)
            elif (high := self._high_behind(head)) is not None:
                self.queue.remove(high.key)
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
        ticket = self._tickets[request.key]
        ticket.events.put_nowait(Dispatched(wait))
        self._emit(QueueEvent("admitted", request.priority, caller=request.caller, wait_s=wait))
        if log.isEnabledFor(logging.DEBUG):
            log.debug("dispatch id=%s caller=%s class=%s score=%.2f wait=%.3fs running=%d", request.request_id,
                      request.caller, request.priority.value, self.queue.effective_score(request, now), wait,
                      self.admission.running)
        task = asyncio.create_task(self._run(ticket), name=f"run-{request.engine_id}")
        self._tasks[request.key] = task
        task.add_done_callback(lambda _: self._never_ran(ticket, task))

    async def _run(self, ticket: Ticket) -> None:
        request = ticket.request
        outcome = Outcome.FINISH
        first: float | None = None
        last: float | None = None
        decoded = 0
        batch_mark = self.pace.mark()
        try:
            async for delta in self.engine.generate(request.engine_id, request.prompt, request.params):
                ticket.events.put_nowait(delta)
                now = self.clock()
                if first is None:
                    self.prefills.ended(now)
                    first, batch_mark = now, self.pace.mark()
                    self._emit(QueueEvent("first_token", request.priority, caller=request.caller,
                                          elapsed_s=now - request.arrival))
                    if self.admission.first_token(request.key):
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
            await self.engine.abort(request.engine_id)
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
            log.exception("engine failure id=%s caller=%s", request.request_id, request.caller)
            ticket.events.put_nowait(SchedulerError(outcome, "the engine failed this request"))
        finally:
            self._tasks.pop(request.key, None)
            self._release(request)
            self.drain.record(self.clock() - (request.dispatched_at or request.arrival))
            self._finish(request, outcome)
            self._dispatch()

    def _never_ran(self, ticket: Ticket, task: asyncio.Task) -> None:
        """A task cancelled before its first step never enters `_run`, so its cleanup is here."""
        request = ticket.request
        if self._tasks.get(request.key) is not task:
            return  # `_run` ran and cleaned up
        self._tasks.pop(request.key)
        self._release(request)
        outcome = Outcome.SHUTDOWN if self.closed else Outcome.DISCONNECT
        ticket.events.put_nowait(SchedulerError(outcome, "the request was cancelled"))
        self._finish(request, outcome)
        self._dispatch()

    def _release(self, request: Request) -> None:
        self.admission.release(request.key)
        self.share.ended(request)
