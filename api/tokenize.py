"""POST /tokenize, as vLLM's server answers it (its chat form, `messages`, and its completion form,
`prompt`): a gateway in front of this server (or of vLLM) counts prompt tokens with the model's
own tokenizer, for the context check and admission. Behind the same keys, counted against `rpm`
as token counts (pipeline/rate_limit.py)."""

from __future__ import annotations

from fastapi import Request

from api.auth import identify
from api.body import read_object, validate
from api.chat import check_template_kwargs
from api.deps import services_of
from core.types import Prompt
from engine.base import EngineBackend
from pipeline.prepare import check_model, check_ready
from protocols.openai_chat.request import TokenizeRequest, TokenizeTextRequest
from protocols.openai_chat.tools import tool_use


async def tokenize(request: Request) -> dict:
    services = services_of(request)
    engine = services.engine
    caller = identify(request)
    data = await read_object(request)
    body: TokenizeRequest | TokenizeTextRequest = (
        validate(data, TokenizeTextRequest) if "prompt" in data else validate(data, TokenizeRequest)
    )
    if body.model is not None:
        check_model(engine, body.model)
    if isinstance(body, TokenizeRequest):
        check_template_kwargs(body.chat_template_kwargs)
    check_ready(engine)
    services.pipeline.limiter.admit_count(caller)
    prompt = await (engine.prepare_text(body.prompt) if isinstance(body, TokenizeTextRequest) else _chat(engine, body))
    payload = prompt.payload.get("prompt") if isinstance(prompt.payload, dict) else prompt.payload
    ids = payload if isinstance(payload, list) else []
    return {"count": prompt.num_tokens, "max_model_len": engine.capabilities.max_model_len, "tokens": ids}


async def _chat(engine: EngineBackend, body: TokenizeRequest) -> Prompt:
    tools = tool_use(body.tools, None, None)
    return await engine.prepare(
        [m.to_chat() for m in body.messages],
        body.reasoning_effort,
        tools.tools if tools else (),
        body.chat_template_kwargs,
    )
