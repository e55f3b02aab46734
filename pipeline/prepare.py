"""A validated call checked against the engine: the model exists, it is loaded, the answer fits."""

from __future__ import annotations

from core.types import GenParams, Prompt
from engine.base import EngineBackend
from pipeline.params import ChatCompletionRequest
from pipeline.refusal import Refusal


def check_model(engine: EngineBackend, model: str) -> None:
    served = engine.capabilities.model
    if model != served:
        raise Refusal(404, f"the model {model!r} does not exist; available: {served}", param="model",
                      code="model_not_found")


def check_ready(engine: EngineBackend) -> None:
    if not engine.ready:
        raise Refusal(503, "the model is still loading; retry shortly", code="engine_loading", retry_after_s=5)


async def prepare_generation(engine: EngineBackend, body: ChatCompletionRequest,
                             default_max_tokens: int) -> tuple[Prompt, GenParams]:
    """The engine's prompt (with its token count) and the sampling parameters."""
    check_ready(engine)
    prompt = await engine.prepare([m.to_chat() for m in body.messages], body.reasoning_effort)
    params = GenParams(
        max_tokens=_max_tokens(engine, body, prompt.num_tokens, default_max_tokens),
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        stop=body.stop_list,
        seed=body.seed,
    )
    return prompt, params


def max_tokens_param(body: ChatCompletionRequest) -> str:
    """The parameter a too-long request is blamed on: the one the client sent, else the messages."""
    if body.requested_max_tokens is None:
        return "messages"
    return "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"


def _max_tokens(engine: EngineBackend, body: ChatCompletionRequest, prompt_tokens: int, default: int) -> int:
    caps = engine.capabilities
    context = caps.max_model_len
    room = context - prompt_tokens
    asked = body.requested_max_tokens
    param = max_tokens_param(body)
    if asked is not None and asked > context:
        raise Refusal(400, f"{param} is {asked}, but the model's context is only {context} tokens", param=param,
                      code="invalid_value")
    if room < 1 or (asked is not None and asked > room):
        raise Refusal(
            400,
            f"this model's maximum context length is {context} tokens; the messages take {prompt_tokens} tokens"
            + (f" and {param} asks for {asked} more" if asked is not None else ", leaving no room for an answer"),
            param="messages", code="context_length_exceeded",
        )
    if asked is not None:
        return asked
    budget_room = room if caps.token_budget is None else caps.token_budget - prompt_tokens
    return max(1, min(default, room, budget_room))
