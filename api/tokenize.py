"""POST /tokenize, as vLLM's server answers it: a gateway in front of this server (or of vLLM)
counts prompt tokens with the model's own tokenizer, for the context check and admission. Behind
the same keys, counted against `rpm` as token counts (pipeline/rate_limit.py)."""

from __future__ import annotations

from fastapi import Request

from api.auth import identify
from api.body import read_object, validate
from api.chat import check_template_kwargs
from api.deps import services_of
from pipeline.prepare import check_model, check_ready
from protocols.openai_chat.request import TokenizeRequest
from protocols.openai_chat.tools import tool_use


async def tokenize(request: Request) -> dict:
    services = services_of(request)
    engine = services.engine
    caller = identify(request)
    body = validate(await read_object(request), TokenizeRequest)
    check_template_kwargs(body.chat_template_kwargs)
    if body.model is not None:
        check_model(engine, body.model)
    check_ready(engine)
    services.pipeline.limiter.admit_count(caller)
    tools = tool_use(body.tools, None, None)
    prompt = await engine.prepare(
        [m.to_chat() for m in body.messages],
        body.reasoning_effort,
        tools.tools if tools else (),
        body.chat_template_kwargs,
    )
    ids = prompt.payload if isinstance(prompt.payload, list) else []
    return {"count": prompt.num_tokens, "max_model_len": engine.capabilities.max_model_len, "tokens": ids}
