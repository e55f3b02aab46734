"""A validated call checked against the engine: the model exists, it is loaded, it can take the
tools, the answer fits; and the sampling parameters, constraint and calls to read that it gets."""

from __future__ import annotations

from dataclasses import dataclass

from core.types import GenParams, Prompt, Structured, ToolUse
from engine.base import EngineBackend
from pipeline.call_params import ChatParams
from pipeline.forced_call import forced_schema, is_forced
from pipeline.refusal import Refusal


@dataclass(slots=True)
class Generation:
    """`forced`: a call the engine was constrained to write as JSON, to be read back as calls."""

    prompt: Prompt
    params: GenParams
    forced: ToolUse | None = None


def check_model(engine: EngineBackend, model: str) -> None:
    served = engine.capabilities.model
    if model != served:
        raise Refusal(
            404, f"the model {model!r} does not exist; available: {served}", param="model", code="model_not_found"
        )


def check_ready(engine: EngineBackend) -> None:
    if not engine.ready:
        raise Refusal(503, "the model is still loading; retry shortly", code="engine_loading", retry_after_s=5)


def check_tools_supported(engine: EngineBackend, body: ChatParams) -> None:
    """A model with no known way to take tools is told so, never handed a prompt without them."""
    caps = engine.capabilities
    if body.uses_tools and caps.tool_format is None:
        raise Refusal(
            400,
            f"the model {caps.model!r} has no chat template for tools and no known tool-call format",
            param="tools",
            code="tools_not_supported",
        )


def check_params_supported(engine: EngineBackend, body: ChatParams) -> None:
    for name in sorted(engine.capabilities.unsupported_params):
        value = getattr(body, name, None)
        if value is not None and value is not False and value != [] and value != {}:  # seed 0 is a seed
            raise Refusal(
                400, f"{name} is not supported by this server's engine", param=name, code="unsupported_parameter"
            )


@dataclass(slots=True, frozen=True)
class AnswerBound:
    """For a wire whose answers stop where the context ends (Ollama's): the context a request asks
    for (`num_ctx`; None: the model's) and the tokens it wants at most (None: the server's
    default; `fill`: all the context leaves). The answer gets what is left of both, never a 400
    for asking more. Its cached answers are apart from other wires' (`cache_tag`): one stored
    with `max_tokens` 100 may have stopped where the context did."""

    context_tokens: int | None = None
    answer_tokens: int | None = None
    fill: bool = False

    @property
    def cache_tag(self) -> str:
        return "|to-context" if self.fill else "|bounded"


async def prepare_generation(
    engine: EngineBackend, body: ChatParams, default_max_tokens: int, bound: AnswerBound | None = None
) -> Generation:
    """The engine's prompt (with its token count, rendered tools included) and its parameters."""
    check_ready(engine)
    check_tools_supported(engine, body)
    check_params_supported(engine, body)
    use = body.tool_use()
    native = engine.capabilities.tool_format == "native"
    forced = use if is_forced(use) and not native else None
    if body.prompt_text is not None:
        prompt = await engine.prepare_text(body.prompt_text)
    else:
        prompt = await engine.prepare(
            [m.to_chat() for m in body.messages],
            body.reasoning_effort,
            use.tools if use else (),
            body.chat_template_kwargs,
        )
    params = GenParams(
        max_tokens=(
            _max_tokens(engine, body, prompt.num_tokens, default_max_tokens)
            if bound is None
            else _bounded(engine, bound, prompt.num_tokens, default_max_tokens)
        ),
        temperature=body.temperature,
        top_p=body.top_p,
        stop=body.stop_list,
        seed=body.seed,
        presence_penalty=body.presence_penalty or 0.0,
        frequency_penalty=body.frequency_penalty or 0.0,
        repetition_penalty=body.repetition_penalty or 1.0,
        top_k=None if body.top_k is None else max(0, body.top_k),
        min_p=body.min_p,
        min_tokens=body.min_tokens or 0,
        ignore_eos=bool(body.ignore_eos),
        logit_bias=_logit_bias(body),
        stop_token_ids=list(body.stop_token_ids or ()),
        logprobs=body.logprobs_count,
        structured=Structured(forced_schema(forced)) if forced else body.structured_output(),
        tools=None if forced else use,
        raw=body.prompt_text is not None,
    )
    return Generation(prompt, params, forced)


def _logit_bias(body: ChatParams) -> dict[int, float] | None:
    if not body.logit_bias:
        return None
    try:
        bias = {int(token): value for token, value in body.logit_bias.items()}
    except ValueError:
        raise Refusal(
            400, "logit_bias keys must be token ids (integers as strings)", param="logit_bias", code="invalid_value"
        ) from None
    if any(not -100 <= v <= 100 for v in bias.values()):
        raise Refusal(400, "logit_bias values must be between -100 and 100", param="logit_bias", code="invalid_value")
    return bias


def _bounded(engine: EngineBackend, bound: AnswerBound, prompt_tokens: int, default: int) -> int:
    caps = engine.capabilities
    context = min(caps.max_model_len, bound.context_tokens or caps.max_model_len)
    room = context - prompt_tokens
    if room < 1:
        param = "options.num_ctx" if context < caps.max_model_len else "messages"
        raise Refusal(
            400,
            f"the context is {context} tokens; the prompt is {prompt_tokens}, leaving no room for an answer",
            param=param,
            code="context_length_exceeded",
        )
    budget_room = room if caps.token_budget is None else caps.token_budget - prompt_tokens
    wanted = room if bound.fill else bound.answer_tokens or default
    return max(1, min(wanted, room, budget_room))


def _max_tokens(engine: EngineBackend, body: ChatParams, prompt_tokens: int, default: int) -> int:
    caps = engine.capabilities
    context = caps.max_model_len
    room = context - prompt_tokens
    asked = body.requested_max_tokens
    param = body.max_tokens_param
    if asked is not None and asked > context:
        raise Refusal(
            400,
            f"{param} is {asked}, but the model's context is only {context} tokens",
            param=param,
            code="invalid_value",
        )
    if room < 1 or (asked is not None and asked > room):
        prompt, takes = ("messages", "take") if body.prompt_text is None else ("prompt", "takes")
        raise Refusal(
            400,
            f"this model's maximum context length is {context} tokens; the {prompt} {takes} {prompt_tokens} tokens"
            + (f" and {param} asks for {asked} more" if asked is not None else ", leaving no room for an answer"),
            param=prompt,
            code="context_length_exceeded",
        )
    if asked is not None:
        return asked
    budget_room = room if caps.token_budget is None else caps.token_budget - prompt_tokens
    return max(1, min(default, room, budget_room))
