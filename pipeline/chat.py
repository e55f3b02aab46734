"""One chat call from a caller to the engine and back, whichever transport asked."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field

from cache.similar_index import Match
from cache.store import CachedResponse
from core.types import Delta, ToolCall
from engine.base import EngineBackend
from pipeline.answer import Answer
from pipeline.cache_path import CachePath, CachePlan
from pipeline.call_params import ChatParams
from pipeline.caller import Caller
from pipeline.events import Event, Finished, Queued, ReasoningDelta, Refused, Started, TextDelta, ToolCallPiece, Usage
from pipeline.forced_call import ForcedCallReader
from pipeline.prepare import AnswerBound, check_model, prepare_generation
from pipeline.rate_limit import RateLimiter
from pipeline.refusal import YIELDED, Refusal
from pipeline.usage import UsageLedger, UsageTotals
from scheduler.loop import Scheduler
from scheduler.outcome import Outcome
from scheduler.priority import PriorityInput, PriorityInputError, resolve_priority
from scheduler.request import Dispatched, PriorityClass, Request, RequestKey, SchedulerError, Ticket
from scheduler.status import request_status
from settings.schema import Config

NOTICE_INTERVAL_S = 1.0
_PIECES = re.compile(r"\s*\S+|\s+")


@dataclass(slots=True, frozen=True)
class PriorityHints:
    """What the transport adds to the body's own `priority`: an X-Priority header, batch mode, and
    background work (low unless something names a class)."""

    header: str | None = None
    batch: bool = False
    background: bool = False
    batch_line: bool = False  # a Batch API line: runs on idle capacity only (scheduler/background.py)


@dataclass(slots=True)
class ChatCall:
    """`streamed`: the transport shows output as it comes, so a failure after the first event can
    only be told in-band (counted apart in the metrics)."""

    caller: Caller
    params: ChatParams
    hints: PriorityHints = field(default_factory=PriorityHints)
    request_id: str | None = None
    cache_control: str = ""
    streamed: bool = False
    timeout_s: float | None = None
    bound: AnswerBound | None = None  # the answer stops where the context ends (Ollama), not a 400


class ChatPipeline:
    def __init__(
        self,
        config: Config,
        engine: EngineBackend,
        scheduler: Scheduler,
        cache: CachePath,
        limiter: RateLimiter | None = None,
        usage: UsageLedger | None = None,
    ) -> None:
        self.config = config
        self.engine = engine
        self.scheduler = scheduler
        self.cache = cache
        self.limiter = limiter or RateLimiter()
        self.usage = usage or UsageLedger()
        self.abandoned: Counter[str] = Counter()  # calls whose client left before the queue had them, by stage
        self.tool_calls: Counter[str] = Counter()  # "made", and "parse_errors": output that looked like a call

    async def start(self, call: ChatCall) -> ChatRun:
        """Everything that can refuse before any answer exists; raises Refusal."""
        try:
            return await self._start(call)
        except Refusal as refusal:
            if refusal.code != YIELDED:  # a batch line's try, not an answer: it runs again
                self.usage.record(call.caller.name, UsageTotals(requests=1, rejections=1))
            raise

    async def _start(self, call: ChatCall) -> ChatRun:
        body = call.params
        priority, score = self._priority(call)
        check_model(self.engine, body.model)
        self.limiter.admit_request(call.caller)
        text = body.prompt_text is not None
        request_id = call.request_id or f"{'cmpl' if text else 'chatcmpl'}-{uuid.uuid4().hex}"
        namespace = (
            call.caller.cache_namespace + (call.bound.cache_tag if call.bound else "") + ("|text" if text else "")
        )
        plan = self.cache.plan(self.engine.capabilities.model, body, namespace, call.cache_control)
        try:
            hit = await self.cache.lookup(plan)
        except asyncio.CancelledError:  # waiting on the cache or on an identical request's answer
            self.abandoned["cache"] += 1
            raise
        run = ChatRun(self, call, request_id, priority, plan, hit)
        self.cache.served(plan, call.caller.name, request_id)
        if hit is None:
            try:
                run.ticket, run.forced = await self._submit(call, request_id, priority, score)
            except BaseException:
                run.release()
                raise
        run.rate_headers = self.limiter.headers(call.caller)
        return run

    async def run(self, call: ChatCall) -> AsyncIterator[Event]:
        """start() and events() in one: a refusal at the door is a Refused event too."""
        try:
            chat = await self.start(call)
        except Refusal as refusal:
            yield Refused(refusal)
            return
        async for event in chat.events():
            yield event

    def _priority(self, call: ChatCall) -> tuple[PriorityClass, float]:
        body = call.params
        given = PriorityInput(
            call.hints.header,
            call.caller.key_class,
            call.caller.ceiling,
            body.priority,
            call.hints.batch,
            body.requested_max_tokens,
            body.temperature,
            PriorityClass.LOW if call.hints.background else PriorityClass.MEDIUM,
        )
        try:
            return resolve_priority(given, self.config.scheduler)
        except PriorityInputError as exc:
            raise Refusal(400, str(exc), param=exc.param, code="invalid_priority") from None

    async def _submit(
        self, call: ChatCall, request_id: str, priority: PriorityClass, score: float
    ) -> tuple[Ticket, ForcedCallReader | None]:
        generation = await prepare_generation(
            self.engine, call.params, self.config.server.default_max_tokens, call.bound
        )
        prompt, params = generation.prompt, generation.params
        caller = call.caller
        self.limiter.check_tokens(caller, prompt.num_tokens)
        request = Request(
            request_id=request_id,
            priority=priority,
            score=score,
            prompt=prompt,
            params=params,
            caller=caller.name,
            max_parallel=caller.limits.max_parallel,
            max_queued=caller.limits.max_queued,
            background=call.hints.batch_line,
        )
        try:
            ticket = self.scheduler.submit(request)
        except SchedulerError as exc:
            param = call.params.max_tokens_param if exc.kind is Outcome.TOO_LARGE else None
            refusal = Refusal.from_scheduler(exc, param)
            refusal.headers = self.limiter.headers(caller)
            raise refusal from None
        self.limiter.spend(caller, prompt.num_tokens)
        return ticket, ForcedCallReader(generation.forced) if generation.forced else None


class ChatRun:
    """A started call: what the transport needs for its headers, then its events. Iterate
    `events()` or call `release()`; either frees the queue slot however the call ends."""

    def __init__(
        self,
        pipeline: ChatPipeline,
        call: ChatCall,
        request_id: str,
        priority: PriorityClass,
        plan: CachePlan,
        hit: CachedResponse | None,
    ) -> None:
        self.pipeline = pipeline
        self.call = call
        self.request_id = request_id
        self.priority = priority
        self.plan = plan
        self.hit = hit
        self.ticket: Ticket | None = None
        self.forced: ForcedCallReader | None = None
        self.started = time.monotonic()
        self.rate_headers: dict[str, str] = {}
        self.completion_tokens = 0
        self.queue_wait_s = 0.0
        self.refused = False
        self.yielded = False  # a batch line that gave its slot back: no answer, so no usage; it runs again
        self._released = False

    @property
    def cache_status(self) -> str:
        if self.hit is not None:
            return "SIMILAR" if self.plan.similar is not None else "HIT"
        return self.plan.status

    @property
    def reasoning_effort(self) -> str | None:
        """The effort asked for, or "ignored" where the model's chat template does not read it."""
        asked = self.call.params.reasoning_effort
        if asked is None:
            return None
        return asked if self.pipeline.engine.capabilities.supports_reasoning_effort else "ignored"

    @property
    def prompt_tokens(self) -> int:
        if self.hit is not None:
            return self.hit.prompt_tokens
        return self.ticket.request.prompt.num_tokens if self.ticket is not None else 0

    async def events(self) -> AsyncGenerator[Event, None]:
        try:
            if self.hit is not None:
                for event in _replay(self.hit, self.priority, self.plan.similar, self.call.params.stop_list):
                    yield event
                return
            async for event in self._from_ticket():
                self._account(event)
                yield event
        finally:
            self.release()

    def _account(self, event: Event) -> None:
        if isinstance(event, Started):
            self.queue_wait_s = event.queue_wait_s
        elif isinstance(event, Refused):
            self.refused = True
            self.yielded = event.refusal.code == YIELDED

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        if self.ticket is not None:
            self.pipeline.scheduler.cancel(self.ticket)
            self.pipeline.limiter.spend(self.call.caller, 0 if self.yielded else self.completion_tokens)
        self.pipeline.cache.release(self.plan)
        if self.yielded:
            return
        if self.ticket is not None or self.hit is not None:  # else the queue refused it: start() counts that
            self.pipeline.usage.record(
                self.call.caller.name,
                UsageTotals(
                    requests=1,
                    prompt_tokens=self.prompt_tokens if self.hit is None else 0,
                    completion_tokens=self.completion_tokens,
                    cache_hits=int(self.hit is not None),
                    rejections=int(self.refused),
                    queue_wait_s=self.queue_wait_s,
                ),
            )

    async def _from_ticket(self) -> AsyncIterator[Event]:
        ticket, scheduler = self.ticket, self.pipeline.scheduler
        if ticket is None:
            raise RuntimeError("a run the cache did not answer has a ticket: start() submits it")
        body = self.call.params
        answer, wait = Answer(body.logprobs_count is not None, body.parallel_tool_calls is False), 0.0
        first_token_at: float | None = None
        while True:
            if self._timed_out():
                message = f"no answer within {self.call.timeout_s:g} s; stopped"
                yield Refused(Refusal(408, message, code="timeout"), answer.text)
                return
            event = await ticket.next_event(timeout=NOTICE_INTERVAL_S)
            if event is None:
                if (queued := _queued(scheduler, ticket.key)) is not None:
                    self._mark_open()
                    yield queued
            elif isinstance(event, Dispatched):
                wait = event.queue_wait_s
                self._mark_open()
                yield Started(wait, self.priority.value)
            elif isinstance(event, SchedulerError):
                yield Refused(Refusal.from_scheduler(event), answer.text)
                return
            elif isinstance(event, Delta):
                if event.finish_reason == "abort":
                    yield Refused(Refusal(503, "generation was aborted by the engine", code="aborted"), answer.text)
                    return
                first_token_at = first_token_at or time.monotonic()
                for out in answer.add(self.forced.feed(event) if self.forced else event):
                    yield out
                self.completion_tokens = answer.tokens
                if event.finish_reason:
                    yield self._finished(answer, event, wait, first_token_at)
                    return

    def _finished(self, answer: Answer, last: Delta, wait: float, first_token_at: float | None) -> Finished:
        usage = Usage(self.prompt_tokens, answer.tokens, answer.cached_tokens, answer.reasoning_tokens)
        reason, calls = answer.finish_reason(last.finish_reason or "stop"), answer.tool_calls
        stop = own_stop(last.stop_sequence, reason, self.call.params.stop_list)
        counts = self.pipeline.tool_calls
        counts["made"] += len(calls)
        counts["parse_errors"] += answer.tool_call_errors
        self.pipeline.cache.store(
            self.plan,
            CachedResponse(
                answer.text,
                reason,
                usage.prompt_tokens,
                answer.tokens,
                answer.reasoning,
                answer.reasoning_tokens,
                [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls],
                stop,
            ),
        )
        return Finished(
            answer.text,
            reason,
            usage,
            False,
            wait,
            _speed(answer.tokens, first_token_at),
            answer.reasoning,
            calls,
            tuple(answer.logprobs) if answer.with_logprobs else None,
            stop_sequence=stop,
        )

    def _timed_out(self) -> bool:
        limit = self.call.timeout_s
        return limit is not None and time.monotonic() - self.started > limit

    def _mark_open(self) -> None:
        if self.call.streamed and self.ticket is not None:
            self.ticket.stream_open = True


def _queued(scheduler: Scheduler, key: RequestKey) -> Queued | None:
    status = request_status(scheduler, key)
    if status["state"] != "queued":
        return None
    return Queued(status["position"], status["queue_length"], status["estimated_wait_s"], status["waited_s"])


def own_stop(stop: str | None, reason: str, stops: list[str]) -> str | None:
    """The stop string that ended an answer, when it is one of the request's own: not a stop the
    engine added for itself (gpt-oss's end of thinking), nor another request's (a similar hit)."""
    return stop if reason == "stop" and stop in stops else None


def _replay(hit: CachedResponse, priority: PriorityClass, similar: Match | None, stops: list[str]) -> list[Event]:
    """A stored answer as the same events a fresh one makes, in word-sized pieces."""
    usage = Usage(hit.prompt_tokens, hit.completion_tokens, reasoning_tokens=hit.reasoning_tokens)
    calls = tuple(ToolCall(c["id"], c["name"], c["arguments"]) for c in hit.tool_calls)
    pieces = [
        piece
        for i, c in enumerate(calls)
        for piece in (ToolCallPiece(i, c.id, c.name, ""), ToolCallPiece(i, None, None, c.arguments))
    ]
    return [
        Started(0.0, priority.value),
        *(ReasoningDelta(p) for p in _PIECES.findall(hit.reasoning)),
        *(TextDelta(p) for p in _PIECES.findall(hit.text)),
        *pieces,
        Finished(
            hit.text,
            hit.finish_reason,
            usage,
            True,
            0.0,
            reasoning=hit.reasoning,
            tool_calls=calls,
            similarity=similar.similarity if similar is not None else None,
            stop_sequence=own_stop(hit.stop_sequence, hit.finish_reason, stops),
        ),
    ]


def _speed(tokens: int, first_token_at: float | None) -> float | None:
    if first_token_at is None:
        return None
    return round(tokens / max(time.monotonic() - first_token_at, 1e-6), 1)
