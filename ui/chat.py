"""Chat for the browser: the same validation, cache and scheduler as the HTTP API, called in
process, turned into a stream of plain events the page renders. No Gradio here."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import AsyncIterator, Literal

from pydantic import ValidationError

from api.cached import lookup, plan_cache, write_back
from api.chat import prepare_generation
from api.errors import APIError
from api.openai_format import Completion
from api.schemas import ChatCompletionRequest, describe
from api.services import Services
from engine.base import Delta
from scheduler.priority import PriorityInput, PriorityInputError, resolve_priority
from scheduler.request import Dispatched, Request, SchedulerError
from scheduler.status import request_status

NOTICE_INTERVAL_S = 1.0

EventKind = Literal["queued", "started", "text", "done", "rejected", "error"]


@dataclass(slots=True)
class ChatSettings:
    priority: str = "medium"
    max_tokens: int = 512
    temperature: float = 0.7
    top_p: float = 1.0
    reasoning_effort: str = "medium"
    timeout_s: float = 300.0
    system_prompt: str = ""


@dataclass(slots=True)
class ChatEvent:
    kind: EventKind
    text: str = ""
    position: int = 0
    queue_length: int = 0
    eta_s: float | None = None
    message: str = ""
    retry_after_s: int | None = None
    info: dict = field(default_factory=dict)


def build_body(history: list[dict], settings: ChatSettings) -> ChatCompletionRequest:
    messages = ([{"role": "system", "content": settings.system_prompt}] if settings.system_prompt.strip() else [])
    messages += [{"role": m["role"], "content": _text(m["content"])} for m in history]
    return ChatCompletionRequest.model_validate({
        "messages": messages, "max_tokens": settings.max_tokens, "temperature": settings.temperature,
        "top_p": settings.top_p, "reasoning_effort": settings.reasoning_effort, "priority": settings.priority,
    })


async def run_chat(services: Services, history: list[dict], settings: ChatSettings,
                   request_id: str | None = None) -> AsyncIterator[ChatEvent]:
    """Events for one answer: queued (each second while waiting), started, text (the whole answer so
    far), then done; or rejected (429-like, with a retry time) or error."""
    request_id = request_id or f"ui-{uuid.uuid4().hex}"
    try:
        body = build_body(history, settings)
        cls, score = resolve_priority(PriorityInput(body=body.priority, max_tokens=body.max_tokens,
                                                    temperature=body.temperature), services.config.scheduler)
    except ValidationError as exc:
        yield ChatEvent("error", message=describe(exc)[1])
        return
    except PriorityInputError as exc:
        yield ChatEvent("error", message=str(exc))
        return
    started = time.monotonic()
    plan = plan_cache(services, body, None)
    hit = await lookup(services, plan)
    if hit is not None:
        info = {"priority": cls.value, "queue_wait_s": 0.0, "tokens": hit.completion_tokens, "cached": True}
        yield ChatEvent("done", text=hit.text, info=info)
        return
    on_finish, after = write_back(services, plan)
    try:
        async for event in _generate(services, body, Request(request_id, cls, score, *prepare_generation(services, body)),
                                     on_finish, settings.timeout_s, started):
            yield event
    except APIError as exc:
        yield ChatEvent("error", message=exc.message)
    finally:
        after()


async def _generate(services: Services, body: ChatCompletionRequest, queued: Request, on_finish,  # noqa: ANN001
                    timeout_s: float, started: float) -> AsyncIterator[ChatEvent]:
    scheduler = services.scheduler
    try:
        ticket = scheduler.submit(queued)
    except SchedulerError as exc:
        yield _refusal(exc)
        return
    completion = Completion.start(queued.request_id, services.engine.capabilities.model, queued.prompt.num_tokens)
    completion.on_finish = on_finish
    info = {"priority": queued.priority.value, "cached": False, "queue_wait_s": 0.0}
    first_token_at: float | None = None
    try:
        while True:
            if time.monotonic() - started > timeout_s:
                yield ChatEvent("error", text=completion.text, message=f"no answer within {timeout_s:g} s; stopped")
                return
            event = await ticket.next_event(timeout=NOTICE_INTERVAL_S)
            if event is None:
                status = request_status(scheduler, queued.request_id)
                if status["state"] == "queued":
                    yield ChatEvent("queued", position=status["position"], queue_length=status["queue_length"],
                                    eta_s=status["estimated_wait_s"])
            elif isinstance(event, Dispatched):
                info["queue_wait_s"] = round(event.queue_wait_s, 2)
                yield ChatEvent("started", info=dict(info))
            elif isinstance(event, SchedulerError):
                yield _refusal(event, completion.text)
                return
            elif isinstance(event, Delta):
                first_token_at = first_token_at or time.monotonic()
                completion.add(event)
                if event.finish_reason:
                    info.update(_speed(completion, first_token_at))
                    yield ChatEvent("done", text=completion.text, info=info)
                    return
                yield ChatEvent("text", text=completion.text)
    finally:
        ticket.close()
        scheduler.cancel(queued.request_id)


def _refusal(error: SchedulerError, text: str = "") -> ChatEvent:
    kind: EventKind = "rejected" if error.retry_after_s is not None else "error"
    return ChatEvent(kind, text=text, message=error.message, retry_after_s=error.retry_after_s)


def _speed(completion: Completion, first_token_at: float) -> dict:
    seconds = max(time.monotonic() - first_token_at, 1e-6)
    return {"tokens": completion.completion_tokens, "tokens_per_s": round(completion.completion_tokens / seconds, 1),
            "finish_reason": completion.finish_reason}


def _text(content: object) -> str:
    """Gradio may hand message content as a string or as a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content or "")
