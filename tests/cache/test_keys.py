"""Cache keys: the canonical request, its digest, cacheability and normalization (pure functions)."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from cache.keys import KeyedRequest, is_cacheable, make_key, namespace_for, normalize
from settings.schema import CacheConfig

BASE = KeyedRequest(
    model="sim",
    messages=(("system", "be brief"), ("user", "Say something about queues.")),
    max_tokens=16,
    temperature=0.0,
    top_p=1.0,
    stop=("\n",),
    seed=None,
    reasoning_effort=None,
)
CONFIG = CacheConfig()


def test_the_key_is_stable_and_the_sha256_of_the_canonical_form():
    key = make_key(BASE, CONFIG)
    assert make_key(dataclasses.replace(BASE), CONFIG) == key
    assert key.digest == hashlib.sha256(key.canonical.encode("utf-8")).hexdigest()
    canonical = json.loads(key.canonical)
    assert canonical["model"] == "sim" and canonical["max_tokens"] == 16
    assert canonical["messages"] == [["system", "be brief"], ["user", "Say something about queues."]]


def test_the_digest_function_is_injectable():
    seen: list[bytes] = []

    def digest(data: bytes) -> str:
        seen.append(data)
        return "fixed"

    key = make_key(BASE, CONFIG, digest=digest)
    assert key.digest == "fixed"
    assert seen == [key.canonical.encode("utf-8")]


@pytest.mark.parametrize(
    "change",
    [
        {"model": "other"},
        {"messages": (("system", "be brief"), ("user", "Say something about stacks."))},
        {"messages": (("user", "be brief"), ("user", "Say something about queues."))},  # the role counts
        {"messages": (("user", "Say something about queues."),)},
        {"max_tokens": 17},
        {"max_tokens": None},
        {"temperature": 0.5},
        {"temperature": None},
        {"top_p": 0.9},
        {"stop": ()},
        {"stop": ("\n", "END")},
        {"seed": 7},
        {"reasoning_effort": "high"},
        {"namespace": "key:abc"},
    ],
    ids=lambda change: next(iter(change)),
)
def test_every_output_deciding_field_changes_the_key(change):
    base = make_key(BASE, CONFIG)
    changed = make_key(dataclasses.replace(BASE, **change), CONFIG)
    assert changed.canonical != base.canonical
    assert changed.digest != base.digest


def test_message_boundaries_are_part_of_the_key():
    one = dataclasses.replace(BASE, messages=(("user", "ab"),))
    two = dataclasses.replace(BASE, messages=(("user", "a"), ("user", "b")))
    assert make_key(one, CONFIG).digest != make_key(two, CONFIG).digest


@pytest.mark.parametrize(
    ("temperature", "seed", "expected"),
    [
        (0.0, None, True),
        (0, None, True),
        (0.7, 3, True),
        (None, 0, True),
        (0.7, None, False),
        (None, None, False),  # the default temperature is 1: sampled
    ],
)
def test_deterministic_mode_caches_temperature_zero_or_a_seed(temperature, seed, expected):
    request = dataclasses.replace(BASE, temperature=temperature, seed=seed)
    assert is_cacheable(request, "deterministic") is expected


@pytest.mark.parametrize(("temperature", "seed"), [(0.0, None), (0.7, None), (None, 5)])
def test_mode_all_caches_everything_and_off_nothing(temperature, seed):
    request = dataclasses.replace(BASE, temperature=temperature, seed=seed)
    assert is_cacheable(request, "all") is True
    assert is_cacheable(request, "off") is False


def _key_of(text: str, config: CacheConfig) -> str:
    return make_key(dataclasses.replace(BASE, messages=(("user", text),)), config).digest


def test_normalization_is_off_by_default():
    assert CacheConfig().normalize is False and CacheConfig().casefold is False
    assert normalize("  Caf\u0065\u0301   au  lait \n", CONFIG) == "  Caf\u0065\u0301   au  lait \n"
    assert _key_of("a  b", CONFIG) != _key_of("a b", CONFIG)
    assert _key_of("caf\u00e9", CONFIG) != _key_of("cafe\u0301", CONFIG)
    assert _key_of("Hello", CONFIG) != _key_of("hello", CONFIG)


def test_normalization_applies_nfc_and_collapses_whitespace_but_keeps_case():
    config = CacheConfig(normalize=True)
    assert normalize("  cafe\u0301 \t au\n\nlait  ", config) == "caf\u00e9 au lait"
    assert _key_of("a  b", config) == _key_of(" a\tb\n", config)
    assert _key_of("caf\u00e9", config) == _key_of("cafe\u0301", config)
    assert _key_of("Hello", config) != _key_of("hello", config)
    assert _key_of("a b", config) != _key_of("ab", config)


def test_case_folding_only_when_configured_and_only_with_normalization():
    folded = CacheConfig(normalize=True, casefold=True)
    assert normalize("  Stra\u00dfe  QUEUE ", folded) == "strasse queue"
    assert _key_of("Hello  World", folded) == _key_of("hello world", folded)
    not_normalized = CacheConfig(casefold=True)
    assert _key_of("Hello", not_normalized) != _key_of("hello", not_normalized)


def test_normalization_touches_message_text_only():
    config = CacheConfig(normalize=True, casefold=True)
    key = make_key(dataclasses.replace(BASE, messages=(("user", "  Hi  "),), stop=("  END  ",)), config)
    canonical = json.loads(key.canonical)
    assert canonical["messages"] == [["user", "hi"]]
    assert canonical["stop"] == ["  END  "]


def test_namespace_for():
    shared = CacheConfig(namespace_by_key=False)
    assert namespace_for("key-a", shared) == namespace_for("key-b", shared) == namespace_for(None, shared) == ""
    per_key = CacheConfig()  # the default: one key's answers are never another's
    a, b = namespace_for("key-a", per_key), namespace_for("key-b", per_key)
    assert a.startswith("key:") and len(a) == len("key:") + 16
    assert a != b and a == namespace_for("key-a", per_key)
    assert "key-a" not in a  # the key itself is never stored
    assert namespace_for(None, per_key) not in (a, b)
    keyed_a = make_key(dataclasses.replace(BASE, namespace=a), per_key)
    keyed_b = make_key(dataclasses.replace(BASE, namespace=b), per_key)
    assert keyed_a.digest != keyed_b.digest
