"""vLLM's async engine (AsyncLLM) behind the engine protocol: the CPU build with the bundled small
model by default, the CUDA build with gpt-oss-20b on a GPU, one code path for both.

vllm is imported only when this backend starts, inside a worker thread, so the event loop keeps
answering /healthz (503, loading) during the 20-odd seconds the engine takes to come up.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import logging
import os
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from core.types import ChatMessage, Delta, FinishReason, GenParams, Prompt, TokenLogprob, Tool, ToolFormat
from engine.base import Capabilities, EngineError, EngineRejected, EngineStats
from engine.chat_template import message_dicts, template_for_tools, tool_dicts, tool_format
from engine.harmony import CHANNEL, MESSAGE, split_channels
from engine.harmony_answer import ANSWER_SUFFIX, THINKING_ENDS, answer_header
from engine.hermes import split_tool_calls, strict_calls
from engine.kv_size import default_cpu_kv_bytes
from engine.model_files import resolve_model
from engine.suspension import Suspensions, remaining
from settings.schema import EngineConfig, VllmConfig

log = logging.getLogger("gpt_oss_webui.engine")

_FINISH: dict[str, FinishReason] = {"stop": "stop", "length": "length", "abort": "abort"}


# A seeded request gets its own torch generator; when vLLM drops a token sampled for a prompt it
# prefills in parts, it rewinds that generator's offset, which a CPU generator does not have: the
# engine process dies ("CPU Generator does not use offset") and every request with it.
CPU_UNSUPPORTED_PARAMS = frozenset({"seed"})


class VllmEngine:
    def __init__(self, config: VllmConfig) -> None:
        self.config = config
        self._engine: Any = None
        self._tokenizer: Any = None
        self._budget = 0
        self._block_size = 1
        self._reasoning = False
        self._harmony = False
        self._tool_format: ToolFormat | None = None
        self._stats: dict[str, float] = {}
        self._generated = 0
        self._on_cpu = False
        self._parts: dict[str, str] = {}  # a request's id -> the id of its vLLM request now (a new one per resume)
        self._suspended = Suspensions()
        self._aborting: set[asyncio.Task] = set()
        # templating and tokenizing a prompt (up to the body bound, 1 MiB) run here, off the event loop;
        # one thread, since a fast tokenizer used from two at once can raise "Already borrowed"
        self._prompts = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vllm-prompt")

    @classmethod
    def from_config(cls, config: EngineConfig) -> VllmEngine:
        return cls(config.vllm)

    @property
    def ready(self) -> bool:
        return self._engine is not None

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            model=self.config.served_model_name,
            max_model_len=self.config.max_model_len,
            token_budget=self._budget,
            supports_priority=self.config.scheduling_policy == "priority",
            block_size=self._block_size,
            supports_reasoning_effort=self._reasoning,
            max_num_seqs=self.config.max_num_seqs,
            tool_format=self._tool_format,
            unsupported_params=CPU_UNSUPPORTED_PARAMS if self._on_cpu else frozenset(),
            serial_prefill=self._on_cpu,
            resumable=True,
        )

    async def start(self) -> None:
        self._engine = await asyncio.to_thread(self._build)
        self._tokenizer = self._engine.get_tokenizer()
        cache = self._engine.vllm_config.cache_config
        self._block_size = cache.block_size
        self._budget = cache.num_gpu_blocks * cache.block_size
        template = getattr(self._tokenizer, "chat_template", None) or ""
        self._reasoning = "reasoning_effort" in template
        self._harmony = has_harmony_tokens(self._tokenizer)
        self._tool_format = tool_format(template, self._harmony)

    def _build(self) -> Any:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.v1.engine.async_llm import AsyncLLM
        except ImportError:
            raise EngineError(
                "vLLM is not installed: scripts/install-engine.sh .venv/bin/python all installs its CPU build"
            ) from None

        from vllm.platforms import current_platform

        from engine.vllm_stats import stats_logger_factory

        model = resolve_model(self.config.model, self.config.models_dir)
        self._on_cpu = current_platform.is_cpu()
        kwargs = engine_arguments(self.config, model, AsyncEngineArgs, on_cpu=self._on_cpu)
        log.info(
            "KV cache: %s",
            f"{kwargs['kv_cache_memory_bytes'] / 2**20:.0f} MiB"
            if "kv_cache_memory_bytes" in kwargs
            else f"gpu_memory_utilization {self.config.gpu_memory_utilization}",
        )
        args = AsyncEngineArgs(**kwargs)
        return AsyncLLM.from_engine_args(args, stat_loggers=[stats_logger_factory(self._stats)])

    async def stop(self) -> None:
        engine, self._engine = self._engine, None
        if engine is None:
            return
        if engine.output_handler is not None:
            engine.output_handler.cancel()  # otherwise it logs the engine's death as an error
        await asyncio.to_thread(engine.shutdown, 5.0)
        engine.shutdown = lambda *args, **kwargs: None  # its __del__ would shut down again at exit and fail

    async def prepare(
        self,
        messages: list[ChatMessage],
        reasoning_effort: str | None = None,
        tools: tuple[Tool, ...] = (),
        template_kwargs: dict | None = None,
    ) -> Prompt:
        extra: dict[str, Any] = dict(template_kwargs or {})
        if reasoning_effort and self._reasoning:
            extra["reasoning_effort"] = reasoning_effort
        template = getattr(self._tokenizer, "chat_template", None) or ""
        with_tools = bool(tools) or any(m.tool_calls or m.role == "tool" for m in messages)
        if with_tools and (own := template_for_tools(template)) is not None:
            extra["chat_template"] = own
        if tools:
            extra["tools"] = tool_dicts(tools)
        ids = await asyncio.get_running_loop().run_in_executor(self._prompts, self._token_ids, messages, extra)
        return Prompt(num_tokens=len(ids), payload=ids)

    def _token_ids(self, messages: list[ChatMessage], extra: dict[str, Any]) -> list[int]:
        text = self._tokenizer.apply_chat_template(
            message_dicts(messages), add_generation_prompt=True, tokenize=False, **extra
        )
        return self._encode(text)

    def _encode(self, text: str, start_token: bool = False) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=start_token))

    async def prepare_text(self, text: str) -> Prompt:
        """As vLLM's `/v1/completions` tokenizes a prompt: with the tokenizer's special tokens."""
        ids = await asyncio.get_running_loop().run_in_executor(self._prompts, self._encode, text, True)
        return Prompt(num_tokens=len(ids), payload=ids)

    async def generate(self, request_id: str, prompt: Prompt, params: GenParams) -> AsyncIterator[Delta]:
        from vllm.exceptions import VLLMValidationError

        if self._engine is None:
            raise EngineError("engine is not running")
        harmony = self._harmony and not params.raw
        if harmony and params.structured is not None:
            deltas = self._think_then_answer(request_id, prompt.payload, params)
        else:
            deltas = self._run(request_id, prompt.payload, params)
        if harmony:
            deltas = split_channels(deltas, tools=params.tools is not None)
        elif params.tools is not None:
            deltas = split_tool_calls(deltas)
        try:
            async for delta in deltas:
                yield delta
        except VLLMValidationError as exc:  # the request's own values (min_tokens over max_tokens, a logit_bias token)
            raise EngineRejected(str(exc)) from None

    async def _run(
        self, request_id: str, token_ids: list[int], params: GenParams, written: list[int] | None = None
    ) -> AsyncIterator[Delta]:
        """One engine request; `written` collects its output token ids, and its stop string last.
        Suspended (`suspend`), it is aborted in vLLM and waits for `resume`, then runs on as a new
        vLLM request whose prompt ends with the answer so far (the prefix cache keeps most of it)."""
        from vllm.inputs import TokensPrompt

        priority = params.priority if self.config.scheduling_policy == "priority" else 0
        out: list[int] = []
        try:
            for resumes in itertools.count():
                await self._suspended.wait(request_id)
                seen = self._suspended.count(request_id)
                part = self._parts[request_id] = f"{request_id}+{resumes}" if resumes else request_id
                outputs = self._engine.generate(
                    TokensPrompt(prompt_token_ids=token_ids + out),
                    self._sampling_params(remaining(params, len(out))),
                    part,
                    priority=priority,
                )
                async for output in outputs:
                    piece = output.outputs[0]
                    natural_end = output.finished and piece.finish_reason != "abort"
                    if self._suspended.count(request_id) != seen and not natural_end:
                        await outputs.aclose()  # vLLM aborts it, if the suspension's own abort came too early
                        break
                    self._generated += len(piece.token_ids)
                    out.extend(piece.token_ids)
                    if written is not None:
                        written.extend(piece.token_ids)
                    finish = _FINISH.get(piece.finish_reason or "", "stop") if output.finished else None
                    if finish is not None and written is not None:
                        written.append(piece.stop_reason)
                    yield Delta(
                        piece.text,
                        len(piece.token_ids),
                        finish,
                        cached_tokens=output.num_cached_tokens,
                        logprobs=_logprobs(piece, params.logprobs),
                        stop_sequence=stop_string(piece, finish),
                    )
                else:
                    return
        finally:
            self._parts.pop(request_id, None)
            self._suspended.forget(request_id)

    async def _think_then_answer(
        self, request_id: str, token_ids: list[int], params: GenParams
    ) -> AsyncIterator[Delta]:
        """gpt-oss thinks freely, then writes its final message under the constraint. vLLM constrains
        a whole output, so the thinking runs as one request that stops where it ends and the answer
        as a second on the same prefix (the prefix cache keeps its prefill short)."""
        written: list[Any] = []
        thinking = replace(params, structured=None, stop=[*params.stop, *THINKING_ENDS])
        async for delta in self._run(request_id, token_ids, thinking, written):
            header = answer_header(written[-1]) if delta.finish_reason == "stop" else None
            if header is None:
                yield delta
                continue
            header_ids = await asyncio.get_running_loop().run_in_executor(self._prompts, self._encode, header)
            room = params.max_tokens - (len(written) - 1) - len(header_ids)
            if room < 1:
                yield replace(delta, finish_reason="length", stop_sequence=None)
                return
            yield replace(
                delta,
                text=delta.text + header,
                num_tokens=delta.num_tokens + len(header_ids),
                finish_reason=None,
                stop_sequence=None,
            )
            answer = replace(params, max_tokens=room)
            async for last in self._run(request_id + ANSWER_SUFFIX, token_ids + written[:-1] + header_ids, answer):
                yield last

    async def abort(self, request_id: str) -> None:
        if self._engine is not None:
            await self._engine.abort([self._parts.get(request_id, request_id), request_id + ANSWER_SUFFIX])

    def suspend(self, request_id: str) -> None:
        """The sequence's vLLM request is aborted (its blocks stay in the prefix cache until
        needed); `_run` keeps the stream and waits for `resume`."""
        part = self._parts.get(request_id)
        if self._engine is None or part is None:
            raise EngineError(f"request {request_id!r} is not running")
        self._suspended.suspend(request_id)
        task = asyncio.get_running_loop().create_task(self._engine.abort(part))
        self._aborting.add(task)
        task.add_done_callback(self._aborting.discard)

    def resume(self, request_id: str) -> None:
        self._suspended.resume(request_id)

    def stats(self) -> EngineStats:
        usage = float(self._stats.get("kv_usage", 0.0))
        return EngineStats(
            running=int(self._stats.get("running", 0)),
            waiting=int(self._stats.get("waiting", 0)),
            kv_used_tokens=round(usage * self._budget),
            kv_usage=usage,
            generated_tokens=self._generated,
            prefix_cache_hit_rate=self._stats.get("prefix_cache_hit_rate"),
        )

    def _sampling_params(self, params: GenParams) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        constraint = None
        if params.structured is not None:
            schema = params.structured.schema
            constraint = StructuredOutputsParams(json=schema) if schema else StructuredOutputsParams(json_object=True)
        elif self._tool_format == "hermes" and params.tools and any(t.strict for t in params.tools.tools):
            constraint = StructuredOutputsParams(structural_tag=json.dumps(strict_calls(params.tools.tools)))
        return SamplingParams(
            max_tokens=params.max_tokens,
            temperature=1.0 if params.temperature is None else params.temperature,
            top_p=1.0 if params.top_p is None else params.top_p,
            seed=params.seed,
            stop=params.stop or None,
            output_kind=RequestOutputKind.DELTA,
            presence_penalty=params.presence_penalty,
            frequency_penalty=params.frequency_penalty,
            repetition_penalty=params.repetition_penalty,
            top_k=params.top_k or -1,
            min_p=params.min_p or 0.0,
            min_tokens=params.min_tokens,
            ignore_eos=params.ignore_eos,
            logit_bias=params.logit_bias,
            stop_token_ids=params.stop_token_ids or None,
            logprobs=params.logprobs,
            structured_outputs=constraint,
            # harmony's channel markers are special tokens: keep them, with no added spaces (a text
            # completion is read as vLLM's own server writes it: without them)
            skip_special_tokens=params.raw or not self._harmony,
            spaces_between_special_tokens=params.raw or not self._harmony,
        )


def stop_string(piece: Any, finish: FinishReason | None) -> str | None:
    """The stop string that ended the output: vLLM's `stop_reason` is that string, a token id for
    `stop_token_ids`, or None for the end of sequence."""
    reason = piece.stop_reason if finish == "stop" else None
    return reason if isinstance(reason, str) else None


def _logprobs(piece: Any, top: int | None) -> tuple[TokenLogprob, ...]:
    """vLLM's per-token {token id: Logprob} as OpenAI's entries: the chosen token, then the `top`
    most likely ones, best first."""
    if not piece.logprobs or top is None:
        return ()
    out = []
    for token_id, ranked in zip(piece.token_ids, piece.logprobs):
        chosen = ranked[token_id]
        best = sorted(ranked.values(), key=lambda lp: lp.rank or 0)[:top]
        out.append(
            TokenLogprob(
                chosen.decoded_token or "", chosen.logprob, tuple((lp.decoded_token or "", lp.logprob) for lp in best)
            )
        )
    return tuple(out)


def has_harmony_tokens(tokenizer: Any) -> bool:
    """gpt-oss's tokenizer (o200k_harmony) has the channel markers as special tokens; others don't."""
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    return all(marker in vocab for marker in (CHANNEL, MESSAGE))


def cpu_dtype(cpuinfo: str) -> str:
    """bf16 only on a CPU with native bf16 matmuls (AVX-512 BF16 or AMX); elsewhere float32, which
    batched better than bf16 on an AVX2 machine (docs/BENCHMARKS.md, "Figures behind design choices")."""
    flags = set(next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), ()))
    return "bfloat16" if flags & {"avx512_bf16", "amx_bf16"} else "float32"


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except OSError:
        return ""


def engine_arguments(config: VllmConfig, model: str, args_cls: type, on_cpu: bool = False) -> dict[str, Any]:
    """AsyncEngineArgs keyword arguments; an unknown extra argument is a one-line config error. On
    the CPU a KV size of 0 is sized from the machine: vLLM's own CPU default (a share of the whole
    memory node) fails to start on small machines."""
    kwargs: dict[str, Any] = {
        "model": model,
        "served_model_name": config.served_model_name,
        "tensor_parallel_size": config.tensor_parallel_size,
        "pipeline_parallel_size": config.pipeline_parallel_size,
        "max_num_seqs": config.max_num_seqs,
        "max_model_len": config.max_model_len,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "enable_prefix_caching": config.enable_prefix_caching,
        "enforce_eager": config.enforce_eager,
        "scheduling_policy": config.scheduling_policy,
    }
    if config.block_size:
        kwargs["block_size"] = config.block_size
    if config.distributed_executor_backend:
        kwargs["distributed_executor_backend"] = config.distributed_executor_backend
    if config.kv_cache_memory_bytes or on_cpu:
        kwargs["kv_cache_memory_bytes"] = config.kv_cache_memory_bytes or default_cpu_kv_bytes()
    if on_cpu:
        kwargs["dtype"] = cpu_dtype(_read("/proc/cpuinfo"))
    known = {f.name for f in dataclasses.fields(args_cls)}
    for key, value in config.extra_args.items():
        if key not in known:
            raise EngineError(f"engine.vllm.extra_args.{key}: not an argument of vLLM's AsyncEngineArgs")
        kwargs[key] = value
    return kwargs
