"""A chat turn from the page as a pipeline call: the page's settings become the same validated
parameters the API takes. No Gradio here."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from pydantic import ValidationError

from pipeline.caller import Caller
from pipeline.chat import ChatCall, ChatPipeline
from pipeline.events import Event, Refused
from pipeline.refusal import Refusal
from protocols.openai_chat.request import ChatCompletionRequest, describe
from ui.chat.chat_settings import ChatSettings


def build_body(model: str, history: list[dict], settings: ChatSettings, exact: bool = False) -> ChatCompletionRequest:
    """`exact`: no similar-question answer, as `"cache": "exact"` asks through the API."""
    messages = [{"role": "system", "content": settings.system_prompt}] if settings.system_prompt.strip() else []
    messages += [{"role": m["role"], "content": _text(m["content"])} for m in history if not _is_thinking(m)]
    return ChatCompletionRequest.model_validate(
        {
            "model": model,
            "messages": messages,
            "max_tokens": settings.max_tokens,
            "temperature": settings.temperature,
            "top_p": settings.top_p,
            "reasoning_effort": settings.reasoning_effort,
            "priority": settings.priority,
            **({"cache": "exact"} if exact else {}),
        }
    )


def new_request_id() -> str:
    return f"ui-{uuid.uuid4().hex}"


async def run_chat(
    pipeline: ChatPipeline,
    caller: Caller,
    history: list[dict],
    settings: ChatSettings,
    request_id: str | None = None,
    exact: bool = False,
) -> AsyncIterator[Event]:
    """The pipeline's events for one answer; settings the API would refuse are refused alike."""
    try:
        body = build_body(pipeline.engine.capabilities.model, history, settings, exact)
    except ValidationError as exc:
        param, message = describe(exc)
        yield Refused(Refusal(400, message, param=param, code="invalid_value"))
        return
    call = ChatCall(
        caller=caller,
        params=body,
        request_id=request_id or new_request_id(),
        streamed=True,
        timeout_s=settings.timeout_s,
    )
    async for event in pipeline.run(call):
        yield event


@dataclass(slots=True, frozen=True)
class Served:
    """A similar question's answer the page showed: the response id it went out as, and whom it
    went to (`who_is`). Kept in the Gradio session's state on the server, never sent by the client."""

    response_id: str
    who: str


def who_is(caller: Caller, owner: str | None) -> str:
    """Whom an answer went to: the signed-in key, or the anonymous browser (its id cookie); an
    anonymous call without that cookie is told apart from no other."""
    return owner or f"caller:{caller.name}"


def report_similar(
    pipeline: ChatPipeline, caller: Caller, who: str, history: list[dict], settings: ChatSettings, served: Served | None
) -> bool:
    """The page's "ask the model instead": the similar answer the page served is reported wrong,
    as POST /v1/cache/feedback does (CachePath.report), but only by whom it was served to (`who`,
    whoever holds the Gradio session), and only where it answered this caller's request for
    `history` (the key holds the caller's namespace): nobody reports another's."""
    if served is None or served.who != who:
        return False
    response_id = served.response_id
    try:
        body = build_body(pipeline.engine.capabilities.model, history, settings)
    except ValidationError:
        return False
    plan = pipeline.cache.plan(pipeline.engine.capabilities.model, body, caller.cache_namespace)
    report = pipeline.cache.report(caller.name, response_id, request=plan.key.digest) if plan.key else None
    return report is not None


def _is_thinking(message: dict) -> bool:
    """A shown Thinking block is not sent back: the model gets its answers, not its reasoning."""
    return bool((message.get("metadata") or {}).get("title"))


def text_of(content: object) -> str:
    """A message's text, however Gradio handed it (the history keeps text)."""
    return _text(content)


def _text(content: object) -> str:
    """Gradio may hand message content as a string or as a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content or "")
