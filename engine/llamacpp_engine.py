"""llama.cpp in process, through `xllamacpp` (prebuilt wheels of llama.cpp's own server code):
GGUF files as shipped, continuous batching over `n_parallel` slots, one KV cache the slots share.

xllamacpp answers a request by blocking the calling thread and calling back once per streamed
chunk, so each running request holds a worker thread and its chunks cross to the event loop; a
callback that returns True stops the request, which frees its slot after the current step. The
chat template, tool calls, structured outputs and gpt-oss's harmony split are llama.cpp's own
(`tool_format` "native") for models whose template takes tools; a ChatML model whose template has
none (the bundled SmolLM2) gets ours and our `<tool_call>` parser, as under vLLM, over llama.cpp's
text completions, since its chat endpoint would drop the tools without a word. Prompts are
counted by llama.cpp's own template and tokenizer before admission, through the HTTP endpoints
every xllamacpp server also runs on loopback.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator

import httpx

from core.types import ChatMessage, Delta, GenParams, Prompt, Tool, ToolFormat
from engine.base import Capabilities, EngineError, EngineRejected, EngineStats
from engine.chat_template import CHATML_TOOLS, openai_message, render, tool_dicts, tool_format
from engine.hermes import split_tool_calls
from engine.model_files import resolve_gguf
from engine.openai_wire import ChunkReader, tool_fields
from settings.schema import EngineConfig, LlamaCppConfig

log = logging.getLogger("gpt_oss_webui.engine")

UNSUPPORTED_PARAMS = frozenset({"min_tokens", "stop_token_ids"})  # llama.cpp has no such sampling option
_END = object()


class LlamaCppEngine:
    def __init__(self, config: LlamaCppConfig) -> None:
        self.config = config
        self._server: Any = None
        self._http: httpx.AsyncClient | None = None
        self._threads: ThreadPoolExecutor | None = None
        self._cancel: dict[str, threading.Event] = {}
        self._generated = 0
        self._prompt_tokens = 0
        self._cached_tokens = 0
        self._tool_format: ToolFormat | None = None

    @classmethod
    def from_config(cls, config: EngineConfig) -> LlamaCppEngine:
        return cls(config.llamacpp)

    @property
    def ready(self) -> bool:
        return self._server is not None

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(model=self.config.served_model_name, max_model_len=self.config.max_model_len,
                            token_budget=self.config.kv_tokens, supports_priority=False,
                            supports_reasoning_effort=True, max_num_seqs=self.config.n_parallel,
                            tool_format=self._tool_format, unsupported_params=UNSUPPORTED_PARAMS)

    async def start(self) -> None:
        path = resolve_gguf(self.config.model)
        log.info("llama.cpp: loading %s (%d slots, %d KV tokens)", path, self.config.n_parallel, self.config.kv_tokens)
        server = await asyncio.to_thread(_load, self.config, str(path))
        self._threads = ThreadPoolExecutor(self.config.n_parallel + 2, thread_name_prefix="llamacpp")
        self._http = httpx.AsyncClient(base_url=server.listening_address, timeout=30)
        template = (await self._http.get("/props")).json().get("chat_template") or ""
        self._tool_format = "native" if "tools" in template else tool_format(template, harmony=False)
        self._server = server

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        for flag in self._cancel.values():
            flag.set()
        if self._http is not None:
            await self._http.aclose()
        if self._threads is not None:
            await asyncio.to_thread(self._threads.shutdown, True)
        await asyncio.to_thread(_free, server)

    async def prepare(self, messages: list[ChatMessage], reasoning_effort: str | None = None,
                      tools: tuple[Tool, ...] = (), template_kwargs: dict | None = None) -> Prompt:
        if self._tool_format == "hermes" and (tools or any(m.tool_calls or m.role == "tool" for m in messages)):
            ids = await self._tokenize(render(CHATML_TOOLS, messages, tools))
            return Prompt(num_tokens=len(ids), payload={"prompt": ids})
        payload = {"messages": [openai_message(m) for m in messages], "reasoning_effort": reasoning_effort,
                   "tools": tool_dicts(tools), "chat_template_kwargs": template_kwargs}
        rendered = await self._post("/apply-template", {k: v for k, v in payload.items() if v})
        ids = await self._tokenize(rendered["prompt"])
        return Prompt(num_tokens=len(ids), payload=payload)

    async def _tokenize(self, text: str) -> list[int]:
        return (await self._post("/tokenize", {"content": text, "add_special": True, "parse_special": True}))["tokens"]

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._http is None:
            raise EngineError("engine is not running")
        response = await self._http.post(path, json=body)
        if response.status_code >= 400:
            raise EngineRejected(_error_message(response))
        return response.json()

    async def generate(self, request_id: str, prompt: Prompt, params: GenParams) -> AsyncIterator[Delta]:
        if self._server is None or self._threads is None:
            raise EngineError("engine is not running")
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue = asyncio.Queue()
        cancel = self._cancel[request_id] = threading.Event()
        self._prompt_tokens += prompt.num_tokens
        completion = "prompt" in prompt.payload  # ours rendered the tools: llama.cpp continues the text
        body = request_body(self.config.served_model_name, prompt.payload, params)
        done = loop.run_in_executor(self._threads, _serve, self._server, body, completion, cancel, loop, chunks)
        deltas = self._read(chunks)
        if completion and params.tools is not None:
            deltas = split_tool_calls(deltas)
        try:
            async for delta in deltas:
                yield delta
        finally:
            cancel.set()
            self._cancel.pop(request_id, None)
            await asyncio.shield(done)

    async def _read(self, chunks: asyncio.Queue) -> AsyncIterator[Delta]:
        reader = ChunkReader()
        while (chunk := await chunks.get()) is not _END:
            if isinstance(chunk, BaseException):
                raise EngineError(str(chunk))
            if "error" in chunk:
                raise _refusal(chunk["error"])
            for delta in reader.feed(chunk):
                self._generated += delta.num_tokens
                self._cached_tokens += delta.cached_tokens
                yield delta
            if reader.done:
                return
        yield Delta("", 0, reader.finish_reason())

    async def abort(self, request_id: str) -> None:
        if (flag := self._cancel.get(request_id)) is not None:
            flag.set()

    def stats(self) -> EngineStats:
        """llama.cpp reports no KV use; running is what holds a slot now."""
        hit_rate = self._cached_tokens / self._prompt_tokens if self._prompt_tokens else None
        return EngineStats(running=len(self._cancel), generated_tokens=self._generated,
                           prefix_cache_hit_rate=hit_rate)


def request_body(model: str, payload: dict[str, Any], params: GenParams) -> dict[str, Any]:
    """Our parameters under the names llama.cpp's chat endpoint takes."""
    text = {"prompt": payload["prompt"]} if "prompt" in payload else {"messages": payload["messages"]}
    body: dict[str, Any] = {
        "model": model, **text, "stream": True, "return_progress": True,
        "stream_options": {"include_usage": True}, "max_tokens": params.max_tokens,
        "temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k,
        "min_p": params.min_p, "presence_penalty": params.presence_penalty,
        "frequency_penalty": params.frequency_penalty, "repeat_penalty": params.repetition_penalty,
        "ignore_eos": params.ignore_eos,
    }
    if params.stop:
        body["stop"] = params.stop
    if params.seed is not None:
        body["seed"] = params.seed
    if payload.get("reasoning_effort"):
        body["reasoning_effort"] = payload["reasoning_effort"]
    if params.logit_bias:
        body["logit_bias"] = [[token, bias] for token, bias in params.logit_bias.items()]
    if params.logprobs is not None:
        body.update(logprobs=True, top_logprobs=params.logprobs)
    if params.structured is not None and "prompt" in payload:
        body["json_schema"] = params.structured.schema or {"type": "object"}
    elif params.structured is not None:
        schema = params.structured.schema
        body["response_format"] = ({"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
                                   if schema else {"type": "json_object"})
    return body if "prompt" in payload else {**body, **tool_fields(payload, params)}


def _load(config: LlamaCppConfig, path: str) -> Any:
    try:
        import xllamacpp
    except ImportError:
        raise EngineError("llama.cpp is not installed: scripts/install-engine.sh .venv/bin/python all "
                          "(or pip install xllamacpp==2026.10.11549)") from None

    params = xllamacpp.CommonParams()
    params.model.path = path
    params.n_parallel = config.n_parallel
    params.n_ctx = config.kv_tokens
    params.kv_unified = True
    params.n_batch = config.batch_tokens
    params.n_gpu_layers = config.gpu_layers
    params.verbosity = 1 if log.isEnabledFor(logging.DEBUG) else 0
    if config.threads:
        params.cpuparams.n_threads = params.cpuparams_batch.n_threads = config.threads
    for key, value in config.extra_args.items():
        if not hasattr(params, key):
            raise EngineError(f"engine.llamacpp.extra_args.{key}: not a field of xllamacpp's CommonParams")
        setattr(params, key, value)
    try:
        return xllamacpp.Server(params)
    except RuntimeError as exc:
        raise EngineError(f"llama.cpp could not load {path}: {exc}") from None


def _free(server: Any) -> None:
    del server


def _serve(server: Any, body: dict[str, Any], completion: bool, cancel: threading.Event,
           loop: asyncio.AbstractEventLoop, chunks: asyncio.Queue) -> None:
    """Runs in a worker thread for the request's whole life."""

    def on_chunk(chunk: Any) -> bool:
        try:
            if isinstance(chunk, dict) and "prompt_progress" not in chunk:
                loop.call_soon_threadsafe(chunks.put_nowait, chunk)
        except RuntimeError:  # the loop has closed
            return True
        return cancel.is_set()

    try:
        (server.handle_completions if completion else server.handle_chat_completions)(body, on_chunk)
    except Exception as exc:  # noqa: BLE001 - it reaches the request as an engine error
        _put(loop, chunks, exc)
    _put(loop, chunks, _END)


def _put(loop: asyncio.AbstractEventLoop, chunks: asyncio.Queue, item: object) -> None:
    try:
        loop.call_soon_threadsafe(chunks.put_nowait, item)
    except RuntimeError:
        pass


def _refusal(error: Any) -> EngineError:
    message = error.get("message", str(error)) if isinstance(error, dict) else str(error)
    code = error.get("code", 500) if isinstance(error, dict) else 500
    return EngineRejected(message) if isinstance(code, int) and 400 <= code < 500 else EngineError(message)


def _error_message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"llama.cpp answered {response.status_code}"
