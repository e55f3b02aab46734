"""Stored responses on a real Redis, shared by two gateways (two real servers of ours on the
simulator): a chain started through one continues through the other, each caller's own, bounded
by count and by bytes, the bytes counted exactly."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest

from responses.redis_store import BY_AGE, BY_CALLER, HELD, PREFIX, SIZES, TOTAL, RedisResponseStore, StoreUnavailable
from responses.store import StoredResponse
from tests.conftest import live_server

KEYS = "server.keys=[{name: alice, key: sk-alice-0001}, {name: bob, key: sk-bob-00001}]"


def post(url: str, key: str, **body) -> httpx.Response:
    return httpx.post(
        url + "/v1/responses",
        json={"model": "sim", "max_output_tokens": 20, **body},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )


def test_a_chain_started_on_one_gateway_continues_on_the_other(redis_url: str, tmp_path) -> None:
    settings = (
        KEYS,
        "responses.backend=redis",
        f"state.redis_url={redis_url}",
        f"responses.path={tmp_path / 'r.sqlite3'}",
    )  # the seal's key file, shared by both
    with live_server(*settings) as a, live_server(*settings) as b:
        first = post(a.url, "sk-alice-0001", input="Start here").json()
        alice = {"Authorization": "Bearer sk-alice-0001"}
        assert httpx.get(f"{b.url}/v1/responses/{first['id']}", headers=alice).json()["output"] == first["output"]
        second = post(b.url, "sk-alice-0001", input="Go on", previous_response_id=first["id"]).json()
        assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"]
        assert post(b.url, "sk-bob-00001", input="x", previous_response_id=first["id"]).status_code == 404
        assert httpx.delete(f"{a.url}/v1/responses/{second['id']}", headers=alice).json()["deleted"] is True
        assert httpx.get(f"{b.url}/v1/responses/{second['id']}", headers=alice).status_code == 404


async def test_past_the_bound_the_oldest_go_first_on_redis(redis_url: str) -> None:
    store = RedisResponseStore(redis_url, ttl_s=60, max_responses=10**9, owner="test")
    await store.open()
    tag, now = uuid.uuid4().hex[:8], time.time()
    try:
        for i in range(3):
            await store.put(StoredResponse(f"{tag}-{i}", "alice", now - 30 + i, None, {"output": []}, []))
        store.max_responses = await store._redis.zcard("gptoss:responses:by-age") - 1
        await store.put(StoredResponse(f"{tag}-3", "alice", now, None, {"output": []}, []))
        assert await store.get(f"{tag}-0", "alice") is None  # the oldest of the whole store went first
        assert await store.get(f"{tag}-3", "alice") is not None and await store.get(f"{tag}-3", "bob") is None
    finally:
        await store.close()


async def test_a_caller_past_its_own_bound_pushes_out_only_its_own_oldest_on_redis(redis_url: str) -> None:
    store = RedisResponseStore(redis_url, ttl_s=60, max_responses=10**9, owner="test", max_per_caller=3)
    await store.open()
    tag, now = uuid.uuid4().hex[:8], time.time()
    alice, mallory = f"alice-{tag}", f"mallory-{tag}"
    try:
        await store.put(StoredResponse(f"{tag}-a", alice, now - 30, None, {"output": []}, []))
        for i in range(10):
            await store.put(StoredResponse(f"{tag}-m{i}", mallory, now - 20 + i, None, {"output": []}, []))
        assert await store.get(f"{tag}-a", alice) is not None
        kept = [i for i in range(10) if await store.get(f"{tag}-m{i}", mallory) is not None]
        assert kept == [7, 8, 9]
        assert await store._redis.zscore("gptoss:responses:by-age", f"{tag}-m0") is None  # gone from the index too
    finally:
        await store.close()


def sized(rid: str, caller: str, created: float, kib: int) -> StoredResponse:
    return StoredResponse(rid, caller, created, None, {"output": []}, [{"content": "x" * kib * 1024}])


async def held(store: RedisResponseStore, caller: str) -> tuple[int, int]:
    """The caller's bytes as the store counts them, and as counted here from its live responses."""
    redis = store._redis
    assert redis is not None
    ids = [rid.decode() for rid in await redis.zrange(BY_CALLER + caller, 0, -1)]
    texts = [await redis.get(PREFIX + rid) for rid in ids]
    return int(await redis.hget(HELD, caller) or 0), sum(len(t) + 128 for t in texts if t)


async def test_bytes_bound_a_callers_own_oldest_then_everyones_oldest_on_redis(redis_url: str) -> None:
    store = RedisResponseStore(redis_url, ttl_s=60, max_responses=10**9, owner="test", max_bytes_per_caller=100 * 1024)
    await store.open()
    tag, now = uuid.uuid4().hex[:8], time.time()
    alice, mallory = f"alice-{tag}", f"mallory-{tag}"
    try:
        await store.put(sized(f"{tag}-a", alice, now - 30, 40))
        for i in range(5):
            await store.put(sized(f"{tag}-m{i}", mallory, now - 20 + i, 40))
        kept = [i for i in range(5) if await store.get(f"{tag}-m{i}", mallory) is not None]
        assert kept == [3, 4] and await store.get(f"{tag}-a", alice) is not None
        assert (await held(store, mallory))[0] == (await held(store, mallory))[1] <= 100 * 1024
        await store.update(f"{tag}-m4", mallory, {"output": [{"text": "y" * 30 * 1024}]})
        counted, live = await held(store, mallory)
        assert counted == live > 100 * 1024  # an update is counted; the next write trims
        assert await store.delete(f"{tag}-m3", mallory)
        assert (await held(store, mallory))[0] == (await held(store, mallory))[1]
        await store.put(sized(f"{tag}-o", f"oldest-{tag}", now - 55, 20))
        store.max_bytes = int(await store._redis.get(TOTAL)) + 10 * 1024  # the whole store, other tests' too
        await store.put(sized(f"{tag}-m5", mallory, now, 20))
        assert await store.get(f"{tag}-o", f"oldest-{tag}") is None  # 20 KiB more: the oldest of anyone's went
        assert await store.get(f"{tag}-a", alice) is not None
        assert int(await store._redis.get(TOTAL)) <= store.max_bytes
        assert await store.get(f"{tag}-m5", mallory) is not None
    finally:
        await store.close()


async def test_responses_stored_before_the_bytes_are_counted_once_at_open(redis_url: str) -> None:
    tag, now = uuid.uuid4().hex[:8], time.time()
    caller = f"old-{tag}"
    old = RedisResponseStore(redis_url, ttl_s=60, max_responses=10**9, owner="test")
    await old.open()
    try:
        await old.put(sized(f"{tag}-0", caller, now, 5))
        redis = old._redis
        assert redis is not None
        size = int((await redis.hget(SIZES, f"{tag}-0")).split(b"|")[0])
        await redis.hdel(SIZES, f"{tag}-0")  # as a version that kept no sizes left it
        await redis.hincrby(HELD, caller, -size)
        await redis.decrby(TOTAL, size)
        for _ in range(2):  # two gateways opening: counted once
            again = RedisResponseStore(redis_url, ttl_s=60, max_responses=10**9, owner="test")
            await again.open()
            await again.close()
        assert await held(old, caller) == (size, size)
    finally:
        await old.close()


async def test_an_id_an_earlier_version_left_in_a_callers_set_does_not_stall_a_write(redis_url: str) -> None:
    """Its global count bound took ids out of the age index only: with no size recorded, the
    trim picked the same id forever and Redis answered BUSY to every gateway."""
    store = RedisResponseStore(redis_url, ttl_s=60, max_responses=10**9, owner="test", max_per_caller=2)
    await store.open()
    tag, now = uuid.uuid4().hex[:8], time.time()
    caller = f"orphan-{tag}"
    try:
        redis = store._redis
        assert redis is not None
        await redis.zadd(BY_CALLER + caller, {f"{tag}-gone": now - 10})
        for i in range(3):
            await asyncio.wait_for(store.put(sized(f"{tag}-{i}", caller, now + i, 1)), 5)
        assert await redis.zrange(BY_CALLER + caller, 0, -1) == [f"{tag}-1".encode(), f"{tag}-2".encode()]
    finally:
        await store.close()


async def test_counts_come_back_to_the_truth_at_a_start_after_responses_went_by_other_means(redis_url: str) -> None:
    store = RedisResponseStore(redis_url, ttl_s=60, max_responses=10**9, owner="test")
    await store.open()
    tag, now = uuid.uuid4().hex[:8], time.time()
    caller = f"drift-{tag}"
    try:
        for i in range(2):
            await store.put(sized(f"{tag}-{i}", caller, now + i, 5))
        redis = store._redis
        assert redis is not None
        await redis.delete(PREFIX + f"{tag}-0")  # Redis's maxmemory eviction, or an earlier version's bound
        await redis.zrem(BY_AGE, f"{tag}-0")
        counted, live = await held(store, caller)
        assert counted > live
        again = RedisResponseStore(redis_url, ttl_s=60, max_responses=10**9, owner="test")
        await again.open()  # a gateway starting
        await again.close()
        counted, live = await held(store, caller)
        assert counted == live > 0
    finally:
        await store.close()


async def test_a_redis_error_while_counting_at_open_is_a_clear_start_failure(redis_url: str) -> None:
    store = RedisResponseStore(redis_url, ttl_s=60, max_responses=10**9, owner="test")
    await store.open()
    await store.put(sized(uuid.uuid4().hex, "anyone", time.time(), 1))
    redis = store._redis
    assert redis is not None
    aside = f"{SIZES}:aside-{uuid.uuid4().hex[:8]}"
    await redis.rename(SIZES, aside)
    try:
        await redis.set(SIZES, "not a hash")
        with pytest.raises(StoreUnavailable, match="Redis does not answer"):
            await RedisResponseStore(redis_url, ttl_s=60, max_responses=10**9, owner="test").open()
    finally:
        await redis.delete(SIZES)
        await redis.rename(aside, SIZES)
        await store.close()
