"""Our parameters as OpenAI's chat API (and vLLM's extensions) take them, and the pieces of a
streamed answer back: for the servers behind a gateway."""

from __future__ import annotations

from typing import Any

from core.types import GenParams, TokenLogprob, ToolCallDelta


def sampling_fields(params: GenParams) -> dict[str, Any]:
    """What differs from the defaults, under the names vLLM's server takes."""
    given = {"presence_penalty": params.presence_penalty, "frequency_penalty": params.frequency_penalty,
             "repetition_penalty": params.repetition_penalty if params.repetition_penalty != 1.0 else None,
             "top_k": params.top_k, "min_p": params.min_p, "min_tokens": params.min_tokens,
             "ignore_eos": params.ignore_eos, "stop_token_ids": params.stop_token_ids,
             "logit_bias": {str(k): v for k, v in (params.logit_bias or {}).items()}}
    out = {k: v for k, v in given.items() if v}
    if params.logprobs is not None:
        out.update(logprobs=True, top_logprobs=params.logprobs)
    if params.structured is not None:
        schema = params.structured.schema
        out["response_format"] = ({"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
                                  if schema else {"type": "json_object"})
    return out


def tool_fields(payload: dict[str, Any], params: GenParams) -> dict[str, Any]:
    """The tools (rendered by prepare), the choice and the template's arguments."""
    kwargs = payload.get("chat_template_kwargs")
    out: dict[str, Any] = {"chat_template_kwargs": kwargs} if kwargs else {}
    use = params.tools
    if use is None:
        return out
    names = {t.name for t in use.tools}
    choice = {"type": "function", "function": {"name": use.choice}} if use.choice in names else use.choice
    return {**out, "tools": payload["tools"], "tool_choice": choice, "parallel_tool_calls": use.parallel}


def call_delta(call: dict[str, Any]) -> ToolCallDelta:
    function = call.get("function") or {}
    return ToolCallDelta(int(call.get("index", 0)), call.get("id"), function.get("name"),
                         function.get("arguments") or "")


def logprobs_of(given: dict[str, Any] | None) -> tuple[TokenLogprob, ...]:
    entries = (given or {}).get("content") or ()
    return tuple(TokenLogprob(e["token"], e["logprob"],
                              tuple((t["token"], t["logprob"]) for t in e.get("top_logprobs") or ()))
                 for e in entries)
