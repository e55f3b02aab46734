"""The simulator engine: deterministic text, timing model, slots, priority and KV capacity."""

from __future__ import annotations

import asyncio
import time

import pytest

from core.types import ChatMessage, GenParams
from engine.base import EngineOutOfMemory
from engine.registry import create_engine
from engine.sim import SimEngine
from settings.schema import EngineConfig, SimConfig


async def run(engine: SimEngine, rid: str, text: str, **params) -> tuple[str, str, int]:
    prompt = await engine.prepare([ChatMessage("user", text)])
    out, tokens, reason = "", 0, None
    async for delta in engine.generate(rid, prompt, GenParams(**{"max_tokens": 50, **params})):
        out += delta.text
        tokens += delta.num_tokens
        reason = delta.finish_reason
    return out, reason, tokens


@pytest.fixture
async def engine():
    eng = SimEngine(SimConfig(token_latency_ms=0, prefill_ms_per_token=0))
    await eng.start()
    yield eng
    await eng.stop()


async def test_same_prompt_and_seed_give_the_same_text(engine):
    a = await run(engine, "a", "hello", temperature=0, seed=1)
    b = await run(engine, "b", "hello", temperature=0, seed=1)
    c = await run(engine, "c", "hello", temperature=0, seed=2)
    d = await run(engine, "d", "goodbye", temperature=0, seed=1)
    assert a == b and a != c and a != d


async def test_length_and_token_counts(engine):
    text, reason, tokens = await run(engine, "x", "long answer please", max_tokens=5, temperature=0)
    assert reason == "length" and tokens == 5 and len(text.split()) == 5


async def test_prompt_tokens_are_counted_per_message(engine):
    one = await engine.prepare([ChatMessage("user", "a b c")])
    two = await engine.prepare([ChatMessage("system", "x"), ChatMessage("user", "a b c")])
    assert one.num_tokens == 3 + 4 + 1 and two.num_tokens == one.num_tokens + 1 + 4


async def test_kv_capacity_is_enforced_with_out_of_memory():
    eng = SimEngine(SimConfig(token_latency_ms=1, prefill_ms_per_token=0, kv_tokens=40))
    await eng.start()
    results = await asyncio.gather(
        *(run(eng, f"r{i}", "a b c d e f", max_tokens=30, temperature=0, seed=i) for i in range(3)),
        return_exceptions=True,
    )
    assert any(isinstance(r, EngineOutOfMemory) for r in results)
    assert eng.stats().kv_used_tokens == 0 and eng.stats().running == 0
    await eng.stop()


async def test_decode_gets_slower_as_the_batch_grows():
    eng = SimEngine(SimConfig(token_latency_ms=2, prefill_ms_per_token=0, batch_slowdown=1.0))
    await eng.start()
    t0 = time.perf_counter()
    await run(eng, "solo", "x", max_tokens=10, temperature=0, seed=3)
    solo = time.perf_counter() - t0
    t0 = time.perf_counter()
    await asyncio.gather(*(run(eng, f"b{i}", "x", max_tokens=10, temperature=0, seed=3) for i in range(4)))
    batch = time.perf_counter() - t0
    assert batch > solo * 2  # each step of four costs 4x one step at batch_slowdown 1.0
    await eng.stop()


async def test_slots_queue_inside_the_engine_by_priority():
    eng = SimEngine(SimConfig(token_latency_ms=1, prefill_ms_per_token=0, max_num_seqs=1))
    await eng.start()
    finished = []

    async def go(rid, priority):
        await run(eng, rid, "x", max_tokens=5, temperature=0, priority=priority)
        finished.append(rid)

    first = asyncio.create_task(go("first", 5))
    await asyncio.sleep(0.001)
    await asyncio.gather(first, go("low", 2), go("high", 0))
    assert finished == ["first", "high", "low"]
    await eng.stop()


async def test_abort_ends_the_stream_and_frees_memory(engine):
    prompt = await engine.prepare([ChatMessage("user", "x")])
    gen = engine.generate("ab", prompt, GenParams(max_tokens=10_000, temperature=0))
    await gen.__anext__()
    await engine.abort("ab")
    rest = [d async for d in gen]
    assert rest[-1].finish_reason == "abort"
    assert engine.stats().running == 0 and engine.stats().kv_used_tokens == 0


def test_registry_knows_sim_and_refuses_unknown_backends():
    assert isinstance(create_engine(EngineConfig(backend="sim")), SimEngine)
    bad = EngineConfig()
    bad.backend = "tensorrt"
    with pytest.raises(ValueError, match="engine.backend"):
        create_engine(bad)


async def test_harmony_thinking_is_always_followed_by_an_answer():
    eng = SimEngine(SimConfig(token_latency_ms=0, prefill_ms_per_token=0, harmony=True, natural_stop=True))
    await eng.start()
    try:
        for seed in range(100):
            text, reason, _ = await run(eng, f"r{seed}", "hi", seed=seed, max_tokens=1000)
            assert reason == "stop" and text.strip(), seed
    finally:
        await eng.stop()


async def test_a_stop_string_ends_the_answer_and_is_named(engine):
    prompt = await engine.prepare([ChatMessage("user", "hello")])
    free, _, _ = await run(engine, "free", "hello", temperature=0, max_tokens=30)
    word = free.split()[3]
    stops = ["never-written", word]
    deltas = [d async for d in engine.generate("stopped", prompt, GenParams(max_tokens=30, temperature=0, stop=stops))]
    text = "".join(d.text for d in deltas)
    assert deltas[-1].finish_reason == "stop" and deltas[-1].stop_sequence == word
    assert word not in text and free.startswith(text)
    plain = [d async for d in engine.generate("plain", prompt, GenParams(max_tokens=5, temperature=0, stop=["zzz"]))]
    assert plain[-1].finish_reason == "length" and plain[-1].stop_sequence is None
