"""Engine backend `openai`: OpenAI-compatible servers (vLLM's `vllm serve` first) behind this one.

Our scheduler keeps the order and the door; this backend only places each dispatched request on an
upstream (`engine/upstream_pool.py`), passes its class down as vLLM's `priority`, and streams the
answer back. A request that fails before its first token is retried on another upstream, so a
client never sees that failure; once tokens have flowed, a failure ends the answer with a clean
error. Cancelling the generator closes the upstream stream, and vLLM aborts the sequence. Prompt
tokens are counted by an upstream's `/tokenize` (vLLM's, or another gateway of ours); where none
answers it, they are estimated from the characters, and the upstream checks its own context length.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from core.types import ChatMessage, Delta, GenParams, Prompt, Tool
from engine.base import Capabilities, EngineError, EngineRejected, EngineStats
from engine.chat_template import openai_message, tool_dicts
from engine.openai_wire import sampling_fields, sse_deltas, text_completion_body, tool_fields
from engine.upstream_pool import Upstream, UpstreamPool, read_vllm_metrics
from settings.schema import EngineConfig, OpenAIUpstreamConfig

log = logging.getLogger("gpt_oss_webui.engine")

_CHARS_PER_TOKEN = 4
_MESSAGE_OVERHEAD = 4
_DEFAULT_CONTEXT = 4096


class UpstreamUnavailable(EngineError):
    """Failed before the first token: another upstream may take the request."""


class OpenAIUpstreamEngine:
    def __init__(self, config: OpenAIUpstreamConfig) -> None:
        self.config = config
        self.pool = UpstreamPool(
            [Upstream(u.url.rstrip("/"), u.api_key, u.weight) for u in config.upstreams],
            config.eject_after,
            config.prefix_affinity,
            config.slots_per_upstream,
        )
        self._client: httpx.AsyncClient | None = None
        self._model = config.model
        self._max_model_len = config.max_model_len
        self._ready = False
        self._watch: asyncio.Task | None = None
        self._generated = 0

    @classmethod
    def from_config(cls, config: EngineConfig) -> OpenAIUpstreamEngine:
        return cls(config.openai)

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            model=self._model,
            max_model_len=self._max_model_len or _DEFAULT_CONTEXT,
            token_budget=None,
            supports_priority=self.config.send_priority,
            supports_reasoning_effort=True,
            tool_format="native",
            max_num_seqs=self.config.slots_per_upstream * len(self.pool.upstreams),
        )

    async def start(self) -> None:
        """Ready once an upstream has said which model it serves; until then /healthz says loading."""
        if not self.pool.upstreams:
            raise EngineError("engine.openai.upstreams is empty: give at least one OpenAI base URL")
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=self.config.connect_timeout_s),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )
        while not await self._discover():
            log.warning(
                "no upstream answers %s yet; retrying", ", ".join(u.url + "/models" for u in self.pool.upstreams)
            )
            await asyncio.sleep(min(self.config.health_interval_s, 2.0))
        self._watch = asyncio.create_task(self._watch_forever(), name="upstream-watch")
        self._ready = True

    async def stop(self) -> None:
        self._ready = False
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()

    async def prepare(
        self,
        messages: list[ChatMessage],
        reasoning_effort: str | None = None,
        tools: tuple[Tool, ...] = (),
        template_kwargs: dict | None = None,
    ) -> Prompt:
        chat = [openai_message(m) for m in messages]
        payload = {
            "messages": chat,
            "reasoning_effort": reasoning_effort,
            "tools": tool_dicts(tools),
            "chat_template_kwargs": template_kwargs,
        }
        counted = await self._count_tokens(payload) if self.config.tokenize else None
        if counted is None:
            chars = sum(len(m.content) + sum(len(c.arguments) for c in m.tool_calls) for m in messages)
            chars += len(json.dumps(payload["tools"])) if tools else 0
            counted = -(-chars // _CHARS_PER_TOKEN) + _MESSAGE_OVERHEAD * len(messages)
        return Prompt(num_tokens=counted, payload=payload)

    async def prepare_text(self, text: str) -> Prompt:
        """Counted by an upstream's `/tokenize` in vLLM's completion form, else from the characters."""
        counted = await self._count_tokens({"prompt": text}) if self.config.tokenize else None
        return Prompt(num_tokens=counted or -(-len(text) // _CHARS_PER_TOKEN) + 1, payload={"prompt": text})

    async def _count_tokens(self, payload: dict[str, Any]) -> int | None:
        """The prompt's tokens by an upstream's tokenizer; None where no upstream can say."""
        now = time.monotonic()
        upstream = self.pool.pick(
            exclude=tuple(u for u in self.pool.upstreams if not u.tokenizes or u.tokenize_after > now)
        )
        if upstream is None or self._client is None:
            return None
        form = {} if "prompt" in payload else {"add_generation_prompt": True}
        body: dict[str, Any] = {"model": self._model, **form, **{k: v for k, v in payload.items() if v}}
        try:
            response = await self._client.post(
                upstream.root + "/tokenize", json=body, headers=_auth(upstream), timeout=self.config.connect_timeout_s
            )
            if response.status_code in (404, 405):
                upstream.tokenizes = False
                log.warning("upstream %s has no /tokenize: prompt tokens there are estimated", upstream.url)
                return None
            if response.status_code == 429:  # its key's token counts are spent: estimated until they renew
                upstream.tokenize_after = now + _retry_after_s(response)
                log.warning("upstream %s refused /tokenize (429): prompt tokens estimated for now", upstream.url)
                return None
            return int(response.json()["count"]) if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None

    async def generate(self, request_id: str, prompt: Prompt, params: GenParams) -> AsyncIterator[Delta]:
        tried: list[Upstream] = []
        # a shared system prompt, or a conversation; a text prompt's start
        affinity = (
            prompt.payload["prompt"][:1000]
            if "prompt" in prompt.payload
            else json.dumps(prompt.payload["messages"][:1])
        )
        while True:
            upstream = self.pool.pick(affinity, exclude=tuple(tried))
            if upstream is None:
                raise EngineError("no upstream is available" + (f" (tried {len(tried)})" if tried else ""))
            tried.append(upstream)
            started = False
            upstream.in_flight += 1
            try:
                async for delta in self._stream(upstream, request_id, prompt, params):
                    started = True
                    yield delta
                self.pool.succeeded(upstream)
                upstream.served += 1
                return
            except UpstreamUnavailable as exc:
                if self.pool.failed(upstream):
                    log.warning("upstream %s taken out after a failed request: %s", upstream.url, exc)
                if started or len(tried) > self.config.retries:
                    raise EngineError(str(exc)) from None
                log.info(
                    "request %s: upstream %s failed before its first token (%s); trying another",
                    request_id,
                    upstream.url,
                    exc,
                )
            finally:
                upstream.in_flight -= 1

    async def _stream(
        self, upstream: Upstream, request_id: str, prompt: Prompt, params: GenParams
    ) -> AsyncIterator[Delta]:
        body = self._body(prompt, params)
        headers = {"Authorization": f"Bearer {upstream.api_key}"} if upstream.api_key else {}
        headers["X-Request-ID"] = request_id
        try:
            async with self._http().stream(
                "POST", upstream.url + _path(prompt), json=body, headers=headers
            ) as response:
                if response.status_code >= 500 or response.status_code in (408, 429):
                    raise UpstreamUnavailable(f"{upstream.url} answered {response.status_code}")
                if response.status_code >= 400:
                    raise EngineRejected(_error_message(await response.aread(), response.status_code))
                async for delta in self._deltas(response):
                    yield delta
        except httpx.HTTPError as exc:
            raise UpstreamUnavailable(f"{upstream.url}: {type(exc).__name__} {exc}".strip()) from None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            raise EngineError("engine is not running")
        return self._client

    async def _deltas(self, response: httpx.Response) -> AsyncIterator[Delta]:
        async for delta in sse_deltas(response.aiter_lines()):
            self._generated += delta.num_tokens
            yield delta

    def _body(self, prompt: Prompt, params: GenParams) -> dict[str, Any]:
        if "prompt" in prompt.payload:
            return text_completion_body(self._model, prompt.payload["prompt"], params, self.config.send_priority)
        body: dict[str, Any] = {
            "model": self._model,
            "messages": prompt.payload["messages"],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": params.max_tokens,
        }
        for name in ("temperature", "top_p"):  # unset, the upstream's own defaults
            if (value := getattr(params, name)) is not None:
                body[name] = value
        if params.stop:
            body["stop"] = params.stop
        if params.seed is not None:
            body["seed"] = params.seed
        if prompt.payload.get("reasoning_effort"):
            body["reasoning_effort"] = prompt.payload["reasoning_effort"]
        if self.config.send_priority:
            body["priority"] = params.priority
        return {**body, **sampling_fields(params), **tool_fields(prompt.payload, params)}

    async def abort(self, request_id: str) -> None:
        """Nothing to do: the scheduler cancels the generator, which closes the upstream stream."""

    def suspend(self, request_id: str) -> None:
        raise EngineError("an upstream server cannot suspend a sequence and resume it")

    def resume(self, request_id: str) -> None:
        raise EngineError("an upstream server cannot suspend a sequence and resume it")

    def stats(self) -> EngineStats:
        healthy = self.pool.healthy
        return EngineStats(
            running=round(sum(u.running for u in healthy)),
            waiting=round(sum(u.waiting for u in healthy)),
            kv_usage=max((u.kv_usage for u in healthy), default=0.0),
            generated_tokens=self._generated,
        )

    async def _discover(self) -> bool:
        for upstream in self.pool.upstreams:
            try:
                response = await self._http().get(upstream.url + "/models", headers=_auth(upstream), timeout=5)
                model = response.json()["data"][0]
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
                continue
            self._model = self._model or model["id"]
            self._max_model_len = self._max_model_len or int(model.get("max_model_len") or 0)
            return True
        return False

    async def _watch_forever(self) -> None:
        """Each upstream's load every metrics interval; health (a failing one out, a recovered one
        back) every health interval; whichever is shorter sets the tick."""
        health, metrics = self.config.health_interval_s, self.config.metrics_interval_s
        tick_s = min(health, metrics)
        every_health, every_metrics = max(1, round(health / tick_s)), max(1, round(metrics / tick_s))
        tick = 0
        while True:
            check, read = tick % every_health == 0, tick % every_metrics == 0
            await asyncio.gather(*(self._probe(u, check, read) for u in self.pool.upstreams))
            tick += 1
            await asyncio.sleep(tick_s)

    async def _probe(self, upstream: Upstream, check_health: bool, read_metrics: bool) -> None:
        try:
            if check_health:
                response = await self._http().get(upstream.url + "/models", headers=_auth(upstream), timeout=5)
                response.raise_for_status()
                if self.pool.succeeded(upstream):
                    log.warning("upstream %s is back", upstream.url)
            if read_metrics and upstream.healthy:
                metrics = await self._http().get(upstream.root + "/metrics", timeout=5)
                if metrics.status_code == 200:
                    read_vllm_metrics(upstream, metrics.text)
        except httpx.HTTPError as exc:
            if check_health and self.pool.failed(upstream):
                log.warning("upstream %s taken out: %s", upstream.url, exc)


def _path(prompt: Prompt) -> str:
    return "/completions" if "prompt" in prompt.payload else "/chat/completions"


def _auth(upstream: Upstream) -> dict[str, str]:
    return {"Authorization": f"Bearer {upstream.api_key}"} if upstream.api_key else {}


def _error_message(raw: bytes, status: int) -> str:
    try:
        return f"upstream refused the request ({status}): {json.loads(raw)['error']['message']}"
    except (ValueError, KeyError, TypeError):
        return f"upstream refused the request ({status})"


def _retry_after_s(response: httpx.Response, default_s: float = 60.0) -> float:
    """The seconds a refusal's Retry-After names, within a minute (a rate window's length)."""
    try:
        return min(default_s, max(1.0, float(response.headers.get("retry-after", default_s))))
    except ValueError:
        return default_s
