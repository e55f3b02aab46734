"""Deterministic simulator engine, for tests and benchmarks only: it is not a language model.

It behaves like a continuous-batching GPU engine so the scheduler can be tested exactly and fast:
text derived from the prompt and seed, a prefill cost per prompt token, a decode step that slows
as the batch grows, a slot limit with its own priority queue, and a KV capacity in tokens that
fails requests with an out-of-memory error when exceeded, as a real GPU would. With `harmony` on,
it writes as gpt-oss does (an analysis message, then a final one, with their special tokens).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import itertools
import json
import random
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

from core.types import ChatMessage, Delta, FinishReason, GenParams, Prompt, TokenLogprob, Tool
from engine import sim_script
from engine.base import Capabilities, EngineError, EngineOutOfMemory, EngineRejected, EngineStats
from engine.harmony import split_channels
from engine.hermes import split_tool_calls
from settings.schema import EngineConfig, SimConfig

_TOKEN = re.compile(r"\w+|[^\w\s]")
_MESSAGE_OVERHEAD = 4
_WORDS = (
    "the queue keeps every request in order while the engine decodes tokens for a small team "
    "sharing one GPU . priority decides who waits and aging makes sure nobody waits forever , "
    "so a short script answer returns quickly and a long batch job still finishes ."
).split()


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


@dataclass(slots=True)
class _Sequence:
    request_id: str
    prompt_tokens: int
    params: GenParams
    rng: random.Random
    natural_len: int
    out: asyncio.Queue = field(default_factory=asyncio.Queue)
    generated: int = 0
    text: str = ""
    prefilled: bool = False
    done: bool = False
    suspended: bool = False  # out of the batch, its answer so far kept, until `resume`
    script: sim_script.Script = field(default_factory=list)  # markers and fixed text, None for a word
    scripted: bool = False  # the answer is the script (a call, JSON): it ends when the script does


class SimEngine:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self._ready = False
        self._waiting: list[tuple[int, int, str]] = []
        self._sequences: dict[str, _Sequence] = {}
        self._running: list[_Sequence] = []
        self._order = itertools.count()
        self._wake: asyncio.Event | None = None
        self._loop_task: asyncio.Task | None = None
        self._generated_tokens = 0
        self._kv_used = 0

    @classmethod
    def from_config(cls, config: EngineConfig) -> SimEngine:
        return cls(config.sim)

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            model=self.config.model_name,
            max_model_len=self.config.max_model_len,
            token_budget=self.config.kv_tokens,
            supports_priority=True,
            max_num_seqs=self.config.max_num_seqs,
            tool_format="harmony" if self.config.harmony else "hermes",
            resumable=True,
        )

    async def start(self) -> None:
        self._wake = asyncio.Event()
        if self.config.startup_s:
            await asyncio.sleep(self.config.startup_s)
        self._loop_task = asyncio.create_task(self._run_loop(), name="sim-engine")
        self._ready = True

    async def stop(self) -> None:
        self._ready = False
        for seq in list(self._sequences.values()):
            self._finish(seq, Delta("", 0, "abort"))
        if self._loop_task:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)

    async def prepare(
        self,
        messages: list[ChatMessage],
        reasoning_effort: str | None = None,
        tools: tuple[Tool, ...] = (),
        template_kwargs: dict | None = None,
    ) -> Prompt:
        """The payload: the text that seeds the answer, and whether the chat ends on a tool's result."""
        rendered = [m.content + "".join(c.name + c.arguments for c in m.tool_calls) for m in messages]
        text = "".join(f"<|{m.role}|>{body}<|end|>" for m, body in zip(messages, rendered))
        tools_text = json.dumps([[t.name, t.description, t.parameters] for t in tools]) if tools else ""
        tokens = sum(count_tokens(body) + _MESSAGE_OVERHEAD for body in rendered) + count_tokens(tools_text)
        return Prompt(
            num_tokens=tokens + 1, payload={"text": text + tools_text, "after_tool": messages[-1].role == "tool"}
        )

    async def prepare_text(self, text: str) -> Prompt:
        return Prompt(num_tokens=count_tokens(text) + 1, payload={"text": text, "after_tool": False})

    async def generate(self, request_id: str, prompt: Prompt, params: GenParams) -> AsyncIterator[Delta]:
        if not self._ready or self._wake is None:
            raise EngineError("engine is not running")
        if request_id in self._sequences:
            raise EngineError(f"request {request_id!r} is already running")
        seq = self._new_sequence(request_id, prompt, params)
        reads_calls = params.tools is not None
        if self.config.harmony and not params.raw:
            stream = split_channels(self._deltas(seq), tools=reads_calls)
        else:
            stream = split_tool_calls(self._deltas(seq)) if reads_calls else self._deltas(seq)
        try:
            async for delta in stream:
                yield delta
        finally:
            self._forget(seq)

    async def _deltas(self, seq: _Sequence) -> AsyncIterator[Delta]:
        try:
            while True:
                item = await seq.out.get()
                if isinstance(item, Exception):
                    raise item
                yield item
                if item.finish_reason:
                    return
        finally:
            self._forget(seq)

    async def abort(self, request_id: str) -> None:
        seq = self._sequences.get(request_id)
        if seq is not None:
            self._finish(seq, Delta("", 0, "abort"))

    def suspend(self, request_id: str) -> None:
        seq = self._sequences.get(request_id)
        if seq is None or seq.done:
            raise EngineError(f"request {request_id!r} is not running")
        seq.suspended = True
        self._release(seq)

    def resume(self, request_id: str) -> None:
        """Back in the engine's queue; its prompt and answer so far prefill again, and the answer
        goes on as it would have (the same random draws)."""
        seq = self._sequences.get(request_id)
        if seq is None or not seq.suspended:
            return
        seq.suspended, seq.prefilled = False, False
        heapq.heappush(self._waiting, (seq.params.priority, next(self._order), request_id))
        self._wake_event().set()

    def stats(self) -> EngineStats:
        used = self._kv_used
        return EngineStats(
            running=len(self._running),
            waiting=len(self._waiting),
            kv_used_tokens=used,
            kv_usage=used / self.config.kv_tokens,
            generated_tokens=self._generated_tokens,
        )

    def _new_sequence(self, request_id: str, prompt: Prompt, params: GenParams) -> _Sequence:
        deterministic = params.temperature == 0 or params.seed is not None
        given = prompt.payload if isinstance(prompt.payload, dict) else {"text": prompt.payload, "after_tool": False}
        digest = hashlib.sha256(f"{given['text']}\x00{params.seed or 0}".encode()).digest()
        rng = random.Random(digest if deterministic else None)
        seq = _Sequence(request_id, prompt.num_tokens, params, rng, natural_len=rng.randint(8, 400))
        self._write_script(seq, given["after_tool"])
        self._sequences[request_id] = seq
        heapq.heappush(self._waiting, (params.priority, next(self._order), request_id))
        self._wake_event().set()
        return seq

    def _write_script(self, seq: _Sequence, after_tool: bool) -> None:
        """A call to the named tool (else the first) unless the chat ends on a tool's result; JSON
        under a constraint; else free words, after harmony's thinking."""
        params, harmony = seq.params, self.config.harmony
        if params.structured is not None:
            with _schema_met("the JSON schema (response_format, or the parameters of a required tool call)"):
                seq.script = sim_script.json_script(params.structured.schema, seq.rng, harmony)
            seq.scripted = True
        elif params.tools is not None and not after_tool:
            by_name = {t.name: t for t in params.tools.tools}
            tool = by_name.get(params.tools.choice) or seq.rng.choice(params.tools.tools)  # a model picks among them
            with _schema_met(f"the parameters of tool {tool.name!r}"):
                seq.script = sim_script.call_script(tool, seq.rng, harmony)
            seq.scripted = True
        elif harmony and not params.raw:
            seq.script = sim_script.thinking(max(2, seq.natural_len // 4)) + sim_script.final_channel()
            seq.natural_len = max(seq.natural_len, len(seq.script) + 1)  # an answer follows the thinking

    def _forget(self, seq: _Sequence) -> None:
        seq.done = True
        self._sequences.pop(seq.request_id, None)
        self._release(seq)

    def _finish(self, seq: _Sequence, last: Delta | Exception) -> None:
        if not seq.done:
            seq.done = True
            seq.out.put_nowait(last)
        self._release(seq)

    def _wake_event(self) -> asyncio.Event:
        if self._wake is None:
            raise EngineError("engine is not running")
        return self._wake

    def _release(self, seq: _Sequence) -> None:
        if seq in self._running:
            self._running.remove(seq)
            self._kv_used -= seq.prompt_tokens + seq.generated

    async def _run_loop(self) -> None:
        while True:
            self._admit_waiting()
            if not self._running:
                wake = self._wake_event()
                wake.clear()
                await wake.wait()
                continue
            await asyncio.sleep(self._step_seconds())
            for seq in list(self._running):
                self._decode_one(seq)

    def _admit_waiting(self) -> None:
        while self._waiting and len(self._running) < self.config.max_num_seqs:
            _, _, request_id = heapq.heappop(self._waiting)
            seq = self._sequences.get(request_id)
            if seq is None or seq.done or seq.suspended or seq in self._running:
                continue
            if self._kv_used + seq.prompt_tokens + seq.generated > self.config.kv_tokens:
                self._finish(seq, EngineOutOfMemory(f"KV cache full: {seq.prompt_tokens} prompt tokens do not fit"))
                continue
            self._running.append(seq)
            self._kv_used += seq.prompt_tokens + seq.generated

    def _step_seconds(self) -> float:
        cfg = self.config
        decode = cfg.token_latency_ms * (1 + cfg.batch_slowdown * (len(self._running) - 1))
        prefill = (
            sum(s.prompt_tokens + s.generated for s in self._running if not s.prefilled) * cfg.prefill_ms_per_token
        )
        return (decode + prefill) / 1000

    def _decode_one(self, seq: _Sequence) -> None:
        if seq.done:
            return
        seq.prefilled = True
        if self._kv_used + 1 > self.config.kv_tokens:
            self._finish(seq, EngineOutOfMemory("KV cache full: out of memory while decoding"))
            return
        piece = self._next_piece(seq)
        seq.generated += 1
        self._kv_used += 1
        self._generated_tokens += 1
        found = _find_stop(seq.text + piece, seq.params.stop)
        if found is not None:
            stop_at, stop = found
            self._finish(seq, Delta((seq.text + piece)[len(seq.text) : stop_at], 1, "stop", stop_sequence=stop))
            return
        seq.text += piece
        logprobs = self._logprobs(seq, piece)
        reason: FinishReason | None = "length" if seq.generated >= seq.params.max_tokens else None
        if reason is None and seq.scripted:
            reason = "stop" if seq.generated >= len(seq.script) else None
        elif reason is None and self.config.natural_stop and seq.generated >= seq.natural_len:
            reason = "stop"
            piece += "<|return|>" if self.config.harmony and not seq.params.raw else ""
        if reason:
            self._finish(seq, Delta(piece, 1, reason, logprobs=logprobs))
        else:
            seq.out.put_nowait(Delta(piece, 1, logprobs=logprobs))

    @staticmethod
    def _logprobs(seq: _Sequence, piece: str) -> tuple[TokenLogprob, ...]:
        """Made-up numbers of the right shape: the piece written, and the next words as alternatives."""
        asked = seq.params.logprobs
        if asked is None:
            return ()
        chosen = -round(seq.rng.random(), 4)
        others = [(word, chosen - 1.0 - i) for i, word in enumerate(_WORDS[: max(0, asked - 1)])]
        return (TokenLogprob(piece, chosen, tuple([(piece, chosen), *others][:asked])),)

    def _next_piece(self, seq: _Sequence) -> str:
        if seq.generated < len(seq.script) and (marker := seq.script[seq.generated]) is not None:
            return marker
        word = seq.rng.choice(_WORDS)
        return word if not seq.text or seq.text.endswith("|>") else " " + word


def _find_stop(text: str, stops: list[str]) -> tuple[int, str] | None:
    """The earliest stop string in `text`: where it starts, and which it is (the first listed of
    those starting there)."""
    hits = [(text.find(s), i, s) for i, s in enumerate(stops) if s and s in text]
    if not hits:
        return None
    at, _, stop = min(hits)
    return at, stop


@contextlib.contextmanager
def _schema_met(what: str) -> Iterator[None]:
    """A schema the sampler cannot satisfy is the client's to fix, as a constrained engine's 400 is."""
    try:
        yield
    except ValueError as exc:
        raise EngineRejected(f"{what} cannot be met: {exc}") from None
