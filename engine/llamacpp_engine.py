"""llama.cpp in process, through `xllamacpp` (prebuilt wheels of llama.cpp's own server code):
GGUF files as shipped, continuous batching over `n_parallel` slots, one KV cache the slots share.

Every xllamacpp server also runs llama.cpp's HTTP server on a loopback port, and answers go
through it: xllamacpp's Python callbacks (one blocked thread per request, a hop to the event loop
per token) were slower than that HTTP server in the same process (docs/BENCHMARKS.md, "Figures
behind design choices"). The streams are read by our own small reader (`engine.sse_stream`), at
about half httpx's CPU per token; the other calls use httpx. The
port takes only a key made at each start, so no other local process can go around our scheduler. Closing a stream stops its request
at the next step and frees its slot. The chat template, tool calls, structured outputs and
gpt-oss's harmony split are llama.cpp's own (`tool_format` "native") for models whose template
takes tools; a ChatML model whose template has none (the bundled SmolLM2) gets ours and our
`<tool_call>` parser, as under vLLM, over llama.cpp's text completions, since its chat endpoint
would drop the tools without a word. Prompts are counted by llama.cpp's own template and
tokenizer before admission. Those OpenAI endpoints do not say which stop string ended an answer
(only llama.cpp's native `/completion` has `stopping_word`) and drop it from the text, so a stop
sequence's answer is a plain stop here: `stop_sequence` stays None.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import replace
from typing import Any

import httpx

from core.types import ChatMessage, Delta, GenParams, Prompt, Tool, ToolFormat
from engine.base import Capabilities, EngineError, EngineRejected, EngineStats
from engine.chat_template import CHATML_TOOLS, openai_message, render, tool_dicts, tool_format
from engine.hermes import split_tool_calls
from engine.model_files import resolve_gguf
from engine.openai_wire import sse_body_deltas, tool_fields
from engine.sse_stream import SseClient, SseResponse, StreamError
from engine.suspension import Suspensions, remaining
from settings.schema import EngineConfig, LlamaCppConfig

log = logging.getLogger("gpt_oss_webui.engine")

UNSUPPORTED_PARAMS = frozenset({"min_tokens", "stop_token_ids"})  # llama.cpp has no such sampling option


class LlamaCppEngine:
    def __init__(self, config: LlamaCppConfig) -> None:
        self.config = config
        self._server: Any = None
        self._http: httpx.AsyncClient | None = None
        self._streams: SseClient | None = None
        self._running = 0
        self._generated = 0
        self._prompt_tokens = 0
        self._cached_tokens = 0
        self._tool_format: ToolFormat | None = None
        self._resumable: set[str] = set()  # running chats an assistant prefill can resume
        self._suspended = Suspensions()
        self._responses: dict[str, SseResponse] = {}  # each running request's stream, to close at a suspension

    @classmethod
    def from_config(cls, config: EngineConfig) -> LlamaCppEngine:
        return cls(config.llamacpp)

    @property
    def ready(self) -> bool:
        return self._server is not None

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            model=self.config.served_model_name,
            max_model_len=self.config.max_model_len,
            token_budget=self.config.kv_tokens,
            supports_priority=False,
            supports_reasoning_effort=True,
            max_num_seqs=self.config.n_parallel,
            tool_format=self._tool_format,
            unsupported_params=UNSUPPORTED_PARAMS,
            serial_prefill=True,
            batched_prefill=False,  # four prompts sent at once had their first tokens at 4.0x one's
            resumable=True,
        )

    async def start(self) -> None:
        path = resolve_gguf(self.config.model)
        log.info("llama.cpp: loading %s (%d slots, %d KV tokens)", path, self.config.n_parallel, self.config.kv_tokens)
        key = secrets.token_urlsafe(24)
        server = await asyncio.to_thread(_load, self.config, str(path), key)
        auth = {"Authorization": f"Bearer {key}"}
        self._http = httpx.AsyncClient(
            base_url=server.listening_address,
            headers=auth,
            timeout=httpx.Timeout(None, connect=10),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
        )
        self._streams = SseClient(server.listening_address, auth)
        template = (await self._http.get("/props")).json().get("chat_template") or ""
        self._tool_format = "native" if "tools" in template else tool_format(template, harmony=False)
        self._server = server

    async def stop(self) -> None:
        if self._server is None:
            return
        if self._http is not None:
            await self._http.aclose()
        if self._streams is not None:
            await self._streams.aclose()
        await asyncio.to_thread(self._free)

    def _free(self) -> None:
        """Drops the last reference off the event loop: the destructor joins llama.cpp's threads."""
        self._server = None

    async def prepare(
        self,
        messages: list[ChatMessage],
        reasoning_effort: str | None = None,
        tools: tuple[Tool, ...] = (),
        template_kwargs: dict | None = None,
    ) -> Prompt:
        if self._tool_format == "hermes" and (tools or any(m.tool_calls or m.role == "tool" for m in messages)):
            ids = await self._tokenize(render(CHATML_TOOLS, messages, tools))
            return Prompt(num_tokens=len(ids), payload={"prompt": ids})
        payload = {
            "messages": [openai_message(m) for m in messages],
            "reasoning_effort": reasoning_effort,
            "tools": tool_dicts(tools),
            "chat_template_kwargs": template_kwargs,
        }
        rendered = await self._post("/apply-template", {k: v for k, v in payload.items() if v})
        ids = await self._tokenize(rendered["prompt"])
        return Prompt(num_tokens=len(ids), payload=payload)

    async def prepare_text(self, text: str) -> Prompt:
        """Its token ids, as llama.cpp's `/completion` reads a prompt (start token, special tokens
        parsed); its text completions continue them."""
        ids = await self._tokenize(text)
        return Prompt(num_tokens=len(ids), payload={"prompt": ids})

    async def _tokenize(self, text: str) -> list[int]:
        return (await self._post("/tokenize", {"content": text, "add_special": True, "parse_special": True}))["tokens"]

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._http is None:
            raise EngineError("engine is not running")
        response = await self._http.post(path, json=body)
        if response.status_code >= 400:
            raise _refusal(response.status_code, response.content)
        return response.json()

    async def generate(self, request_id: str, prompt: Prompt, params: GenParams) -> AsyncIterator[Delta]:
        if self._streams is None:
            raise EngineError("engine is not running")
        completion = "prompt" in prompt.payload  # a text completion, or ours rendered the tools: llama.cpp continues it
        self._prompt_tokens += prompt.num_tokens
        if not completion:
            self._resumable.add(request_id)
        written: list[str] = []
        tokens = 0
        try:
            while True:
                await self._suspended.wait(request_id)
                seen = self._suspended.count(request_id)
                body = request_body(
                    self.config.served_model_name,
                    _continued(prompt.payload, "".join(written)),
                    remaining(params, tokens),
                )
                stream = self._stream(request_id, seen, completion, body, params.tools is not None)
                try:
                    async for delta in stream:
                        if completion and params.logprobs == 0 and delta.logprobs:  # asked for 1: none wanted
                            delta.logprobs = tuple(replace(t, top=()) for t in delta.logprobs)
                        if delta.reasoning or delta.tool_calls:
                            self._resumable.discard(request_id)  # an assistant prefill could not carry these
                        written.append(delta.text)
                        tokens += delta.num_tokens
                        yield delta
                        if delta.finish_reason is not None:
                            return
                finally:
                    await stream.aclose()  # its connection back, its count down, before anything else runs
                if self._suspended.count(request_id) == seen:
                    return
        finally:
            self._resumable.discard(request_id)
            self._suspended.forget(request_id)

    async def _stream(
        self, request_id: str, seen: int, completion: bool, body: dict[str, Any], tools: bool
    ) -> AsyncGenerator[Delta]:
        """One request to llama.cpp's server, until it ends or the sequence is suspended (its
        connection closed, which stops it at llama.cpp's next step)."""
        assert self._streams is not None

        def suspended() -> bool:
            return self._suspended.count(request_id) != seen

        try:
            async with self._streams.post(
                "/v1/completions" if completion else "/v1/chat/completions", body
            ) as response:
                self._responses[request_id] = response
                self._running += 1
                if suspended():
                    return  # suspended during its prefill: llama.cpp answers only after it
                if response.status >= 400:
                    raise _refusal(response.status, await response.read())
                deltas = self._counted(sse_body_deltas(response.chunks()))
                async for delta in split_tool_calls(deltas) if completion and tools else deltas:
                    if suspended() and delta.finish_reason is None:
                        return
                    yield delta
        except StreamError as exc:
            if not suspended():
                raise EngineError(f"llama.cpp: {exc}") from None
        finally:
            if self._responses.pop(request_id, None) is not None:
                self._running -= 1

    async def _counted(self, deltas: AsyncIterator[Delta]) -> AsyncIterator[Delta]:
        async for delta in deltas:
            self._generated += delta.num_tokens
            self._cached_tokens += delta.cached_tokens
            yield delta

    async def abort(self, request_id: str) -> None:
        """Nothing to do: the scheduler cancels the generator, which closes the stream."""

    def suspend(self, request_id: str) -> None:
        """The stream is closed (llama.cpp stops the sequence at its next step); the resume sends
        the chat again with the answer so far as the assistant's message, which llama.cpp
        continues (its prompt cache keeps the prefix where the slot still holds it). Not for a
        chat whose answer has reasoning or tool calls, nor one on the text completions (a text
        completion, or tools through our template)."""
        if request_id not in self._resumable:
            raise EngineError(f"request {request_id!r} cannot be suspended")
        self._suspended.suspend(request_id)
        if (response := self._responses.get(request_id)) is not None:
            response.close()

    def resume(self, request_id: str) -> None:
        self._suspended.resume(request_id)

    def stats(self) -> EngineStats:
        """llama.cpp reports no KV use; running is what holds a slot now."""
        hit_rate = self._cached_tokens / self._prompt_tokens if self._prompt_tokens else None
        return EngineStats(running=self._running, generated_tokens=self._generated, prefix_cache_hit_rate=hit_rate)


def _continued(payload: dict[str, Any], written: str) -> dict[str, Any]:
    """The chat with the answer so far as the assistant's last message: llama.cpp's server goes on
    from it (its assistant prefill)."""
    if not written:
        return payload
    return {**payload, "messages": [*payload["messages"], {"role": "assistant", "content": written}]}


def request_body(model: str, payload: dict[str, Any], params: GenParams) -> dict[str, Any]:
    """Our parameters under the names llama.cpp's chat endpoint takes."""
    text = {"prompt": payload["prompt"]} if "prompt" in payload else {"messages": payload["messages"]}
    body: dict[str, Any] = {
        "model": model,
        **text,
        "stream": True,
        "stream_options": {"include_usage": True},
        "timings_per_token": True,  # each chunk's running token count (engine/openai_wire.py)
        "max_tokens": params.max_tokens,
        "presence_penalty": params.presence_penalty,
        "frequency_penalty": params.frequency_penalty,
        "repeat_penalty": params.repetition_penalty,
        "ignore_eos": params.ignore_eos,
    }
    if params.stop:
        body["stop"] = params.stop
    if params.seed is not None:
        body["seed"] = params.seed
    # Unset, llama.cpp's own defaults (temperature 0.8, top_p 0.95, top_k 40, min_p 0.05), as its server gives
    for name in ("temperature", "top_p", "top_k", "min_p"):
        if (value := getattr(params, name)) is not None:
            body[name] = value
    if payload.get("reasoning_effort"):
        body["reasoning_effort"] = payload["reasoning_effort"]
    if params.logit_bias:
        body["logit_bias"] = [[token, bias] for token, bias in params.logit_bias.items()]
    if params.logprobs is not None and "prompt" in payload:  # the completion endpoint's count (0 gives none)
        body["logprobs"] = max(1, params.logprobs)
    elif params.logprobs is not None:
        body.update(logprobs=True, top_logprobs=params.logprobs)
    if params.structured is not None and "prompt" in payload:
        body["json_schema"] = params.structured.schema or {"type": "object"}
    elif params.structured is not None:
        schema = params.structured.schema
        body["response_format"] = (
            {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
            if schema
            else {"type": "json_object"}
        )
    return body if "prompt" in payload else {**body, **tool_fields(payload, params)}


def _load(config: LlamaCppConfig, path: str, key: str) -> Any:
    try:
        import xllamacpp
    except ImportError:
        raise EngineError(
            "llama.cpp is not installed: scripts/install-engine.sh .venv/bin/python all "
            "(or pip install xllamacpp==2026.10.11549)"
        ) from None

    params = xllamacpp.CommonParams()
    params.model.path = path
    params.n_parallel = config.n_parallel
    params.n_ctx = config.kv_tokens
    params.kv_unified = True
    params.n_batch = config.batch_tokens
    params.n_gpu_layers = config.gpu_layers
    params.verbosity = 1 if log.isEnabledFor(logging.DEBUG) else 0
    params.api_keys = [key]
    if config.threads:
        params.cpuparams.n_threads = params.cpuparams_batch.n_threads = config.threads
    for name, value in config.extra_args.items():
        if not hasattr(params, name):
            raise EngineError(f"engine.llamacpp.extra_args.{name}: not a field of xllamacpp's CommonParams")
        setattr(params, name, value)
    try:
        return xllamacpp.Server(params)
    except RuntimeError as exc:
        raise EngineError(f"llama.cpp could not load {path}: {exc}") from None


def _refusal(status: int, raw: bytes) -> EngineError:
    try:
        message = str(json.loads(raw)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        message = f"llama.cpp answered {status}"
    return EngineRejected(message) if 400 <= status < 500 else EngineError(message)
