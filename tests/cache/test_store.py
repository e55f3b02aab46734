"""ResponseCache on its own: TTL, LRU eviction, persistence, collisions, corruption, concurrency."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from cache.keys import CacheKey, KeyedRequest, make_key
from cache.store import CachedResponse, ResponseCache
from settings.schema import CacheConfig


class FakeClock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float = 1.0) -> None:
        self.now += seconds


MakeCache = Callable[..., Awaitable[ResponseCache]]


@pytest.fixture
async def make_cache(tmp_path: Path):
    """make_cache(name="c", clock=None, **CacheConfig fields): an opened cache, closed at teardown."""
    opened: list[ResponseCache] = []

    async def make(name: str = "c", clock: FakeClock | None = None, **fields) -> ResponseCache:
        config = CacheConfig(path=str(tmp_path / f"{name}.sqlite3")).model_copy(update=fields)  # tiny sizes too
        cache = ResponseCache(config, clock or FakeClock())
        await cache.open()
        opened.append(cache)
        return cache

    yield make
    for cache in opened:
        await cache.close()


def key(n: int) -> CacheKey:
    return CacheKey(f"digest-{n:04d}", f"canonical request {n:04d}")


def answer(n: int) -> CachedResponse:
    return CachedResponse(f"answer {n:04d}", "length", 10 + n, n)


def rows(cache: ResponseCache) -> dict[str, str]:
    """key -> response as the file holds it (read with a separate sqlite3 connection)."""
    with contextlib.closing(sqlite3.connect(cache.config.path)) as db:
        return dict(db.execute("SELECT key, response FROM entries").fetchall())


async def test_put_then_get_round_trip_and_an_unknown_key_misses(make_cache: MakeCache):
    cache = await make_cache()
    assert await cache.get(key(1)) is None
    cache.put(key(1), answer(1))
    assert await cache.get(key(1)) == answer(1)  # at once: the background write need not have happened
    await cache.flush()
    assert await cache.get(key(1)) == answer(1)
    assert set(rows(cache)) == {key(1).digest}
    stats = cache.stats()
    assert (stats["hits"], stats["misses"], stats["entries"]) == (2, 1, 1)


async def test_an_entry_expires_after_its_ttl(make_cache: MakeCache):
    clock = FakeClock()
    cache = await make_cache(clock=clock, ttl_s=10)
    cache.put(key(1), answer(1))
    clock.advance(10)
    assert await cache.get(key(1)) == answer(1)  # exactly at the TTL it still lives
    clock.advance(0.01)
    assert await cache.get(key(1)) is None
    stats = cache.stats()
    assert (stats["expired"], stats["hits"], stats["misses"], stats["entries"], stats["bytes"]) == (1, 1, 1, 0, 0)
    await cache.flush()
    assert rows(cache) == {}
    assert await cache.get(key(1)) is None
    assert cache.stats()["expired"] == 1  # an expired entry is counted once


async def test_purge_expired_removes_old_rows_from_the_file(make_cache: MakeCache):
    clock = FakeClock()
    cache = await make_cache(clock=clock, ttl_s=10)
    cache.put(key(1), answer(1))
    clock.advance(5)
    cache.put(key(2), answer(2))
    await cache.flush()
    assert set(rows(cache)) == {key(1).digest, key(2).digest}
    clock.advance(6)  # key 1 is 11 s old, key 2 is 6 s old
    assert cache.purge_expired() == 1
    await cache.flush()
    assert set(rows(cache)) == {key(2).digest}
    assert cache.stats()["expired"] == 1 and cache.stats()["entries"] == 1
    assert await cache.get(key(2)) == answer(2)
    clock.advance(5)
    assert cache.purge_expired() == 1
    assert cache.purge_expired() == 0
    await cache.flush()
    assert rows(cache) == {}


async def test_lru_eviction_by_max_entries_and_get_refreshes_recency(make_cache: MakeCache):
    clock = FakeClock()
    cache = await make_cache(clock=clock, max_entries=3)
    for n in (1, 2, 3):
        cache.put(key(n), answer(n))
        clock.advance()
    assert await cache.get(key(1)) == answer(1)  # 2 is now the least recently used
    clock.advance()
    cache.put(key(4), answer(4))
    assert await cache.get(key(2)) is None
    assert cache.stats()["evictions"] == 1 and cache.stats()["entries"] == 3
    clock.advance()
    cache.put(key(5), answer(5))  # order now 3, 1, 4 (the failed get of 2 refreshed nothing): 3 goes
    assert await cache.get(key(3)) is None
    for n in (1, 4, 5):
        assert await cache.get(key(n)) == answer(n)
    await cache.flush()
    assert set(rows(cache)) == {key(n).digest for n in (1, 4, 5)}
    assert cache.stats()["evictions"] == 2


async def test_lru_eviction_by_max_bytes(make_cache: MakeCache):
    probe = await make_cache("probe")
    probe.put(key(1), answer(1))
    size = probe.stats()["bytes"]  # every key(n)/answer(n) below has this same size
    clock = FakeClock()
    cache = await make_cache(clock=clock, max_bytes=3 * size + size // 2)
    for n in (1, 2, 3):
        cache.put(key(n), answer(n))
        clock.advance()
    assert cache.stats()["bytes"] == 3 * size
    assert await cache.get(key(1)) == answer(1)
    clock.advance()
    cache.put(key(4), answer(4))
    assert await cache.get(key(2)) is None
    assert cache.stats()["bytes"] == 3 * size and cache.stats()["evictions"] == 1
    huge = CachedResponse("x" * (4 * size), "stop", 1, 1)
    cache.put(key(9), huge)  # larger than the whole cache: not stored, nothing evicted for it
    assert await cache.get(key(9)) is None
    for n in (1, 3, 4):
        assert await cache.get(key(n)) == answer(n)
    assert cache.stats()["evictions"] == 1


async def test_replacing_an_entry_keeps_one_copy_and_the_byte_count(make_cache: MakeCache):
    cache = await make_cache()
    cache.put(key(1), answer(1))
    size = cache.stats()["bytes"]
    cache.put(key(1), answer(1))
    newer = dataclasses.replace(answer(1), text="answer 000X")
    cache.put(key(1), newer)
    assert cache.stats()["entries"] == 1 and cache.stats()["bytes"] == size
    assert await cache.get(key(1)) == newer
    await cache.flush()
    assert len(rows(cache)) == 1


async def test_index_and_lru_order_survive_close_and_reopen(make_cache: MakeCache):
    clock = FakeClock()
    first = await make_cache(clock=clock, max_entries=3)
    for n in (1, 2, 3):
        first.put(key(n), answer(n))
        clock.advance()
    assert await first.get(key(1)) == answer(1)  # recency: 2, 3, 1
    clock.advance()
    before = first.stats()
    await first.close()
    assert first.stats()["enabled"] is False

    second = await make_cache(clock=clock, max_entries=3)
    after = second.stats()
    assert before["entries"] == after["entries"] == 3 and after["bytes"] == before["bytes"] > 0
    second.put(key(4), answer(4))  # the least recently used before the restart goes first
    assert await second.get(key(2)) is None
    clock.advance()
    second.put(key(5), answer(5))
    assert await second.get(key(3)) is None
    for n in (1, 4, 5):
        assert await second.get(key(n)) == answer(n)


async def test_reopen_with_a_smaller_limit_evicts_the_least_recently_used(make_cache: MakeCache):
    clock = FakeClock()
    first = await make_cache(clock=clock)
    for n in (1, 2, 3, 4):
        first.put(key(n), answer(n))
        clock.advance()
    await first.get(key(1))
    await first.close()
    second = await make_cache(clock=clock, max_entries=2)
    assert second.stats()["entries"] == 2
    assert await second.get(key(1)) == answer(1) and await second.get(key(4)) == answer(4)
    assert await second.get(key(2)) is None and await second.get(key(3)) is None
    await second.flush()
    assert set(rows(second)) == {key(1).digest, key(4).digest}


@pytest.mark.parametrize("flushed", [False, True], ids=["pending", "written"])
async def test_a_digest_collision_never_returns_another_requests_answer(make_cache: MakeCache, flushed: bool):
    request = KeyedRequest("sim", (("user", "first"),), 8, 0.0, None, (), None, None)
    other = dataclasses.replace(request, messages=(("user", "second"),))
    config = CacheConfig()
    first_key = make_key(request, config, digest=lambda _: "same-digest")
    second_key = make_key(other, config, digest=lambda _: "same-digest")
    assert first_key.digest == second_key.digest and first_key.canonical != second_key.canonical

    cache = await make_cache()
    cache.put(first_key, answer(1))
    if flushed:
        await cache.flush()
    assert await cache.get(second_key) is None
    assert await cache.get(first_key) == answer(1)
    cache.put(second_key, answer(2))
    if flushed:
        await cache.flush()
    assert await cache.get(first_key) is None
    assert await cache.get(second_key) == answer(2)


async def test_a_corrupt_file_is_moved_aside_and_a_new_one_started(
    make_cache: MakeCache, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(logging.getLogger("gpt_oss_webui"), "propagate", True)
    caplog.set_level(logging.WARNING, logger="gpt_oss_webui.cache")
    garbage = b"this is not an SQLite database \x00\xff" * 64
    (tmp_path / "c.sqlite3").write_bytes(garbage)

    cache = await make_cache()
    cache.put(key(1), answer(1))
    await cache.flush()
    assert await cache.get(key(1)) == answer(1)
    aside = list(tmp_path.glob("c.sqlite3.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == garbage
    warnings = [r for r in caplog.records if r.name == "gpt_oss_webui.cache" and r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "unreadable" in warnings[0].getMessage() and aside[0].name in warnings[0].getMessage()
    await cache.close()
    reopened = await make_cache()  # the new file is a sound database
    assert await reopened.get(key(1)) == answer(1)


async def test_200_concurrent_gets_and_puts_with_different_and_identical_keys(make_cache: MakeCache):
    cache = await make_cache(clock=FakeClock())
    rng = random.Random(42)
    shared_key, shared_answer = key(9999), answer(9999)

    async def worker(n: int) -> None:
        k, a = (key(n), answer(n)) if n % 2 else (shared_key, shared_answer)
        for _ in range(rng.randint(0, 3)):
            await asyncio.sleep(0)
        before = await cache.get(k)
        assert before is None or before == a
        cache.put(k, a)
        for _ in range(rng.randint(0, 3)):
            await asyncio.sleep(0)
        assert await cache.get(k) == a

    await asyncio.gather(*(worker(n) for n in range(200)))
    await cache.flush()
    expected = {key(n).digest for n in range(1, 200, 2)} | {shared_key.digest}
    stored = rows(cache)
    assert set(stored) == expected and cache.stats()["entries"] == len(expected) == 101
    assert all(await asyncio.gather(*(_answers(cache, n) for n in range(1, 200, 2))))
    stats = cache.stats()
    assert stats["hits"] + stats["misses"] == 400 + 100
    assert stats["hits"] >= 300  # every get after a put hits; so do shared gets after the first put


async def _answers(cache: ResponseCache, n: int) -> bool:
    return await cache.get(key(n)) == answer(n)


async def test_clear_removes_everything(make_cache: MakeCache):
    cache = await make_cache()
    for n in (1, 2, 3):
        cache.put(key(n), answer(n))
    assert await cache.clear() == 3
    assert rows(cache) == {}  # clear waits for the writer
    assert (cache.stats()["entries"], cache.stats()["bytes"]) == (0, 0)
    for n in (1, 2, 3):
        assert await cache.get(key(n)) is None
    cache.put(key(4), answer(4))
    assert await cache.get(key(4)) == answer(4)
    await cache.close()
    reopened = await make_cache()
    assert reopened.stats()["entries"] == 1 and await reopened.get(key(4)) == answer(4)
    assert await reopened.clear() == 1
    assert await reopened.clear() == 0


async def test_stats(make_cache: MakeCache):
    cache = await make_cache(ttl_s=30, max_entries=5, max_bytes=4096)
    empty = cache.stats()
    assert empty == {
        "object": "cache.stats",
        "enabled": True,
        "entries": 0,
        "bytes": 0,
        "hits": 0,
        "misses": 0,
        "hit_rate": 0.0,
        "evictions": 0,
        "expired": 0,
        "max_entries": 5,
        "max_bytes": 4096,
        "ttl_s": 30,
    }
    cache.put(key(1), answer(1))
    await cache.get(key(1))
    await cache.get(key(1))
    await cache.get(key(2))
    stats = cache.stats()
    assert (stats["hits"], stats["misses"], stats["hit_rate"], stats["entries"]) == (2, 1, 0.6667, 1)
    assert stats["bytes"] > len(key(1).canonical)
    cache.shared_hit()  # a miss answered by an identical request in flight
    assert (cache.stats()["hits"], cache.stats()["misses"]) == (3, 0)
