"""A JSON value that satisfies a JSON Schema, drawn from a seeded rng.

The simulator writes tool-call arguments and structured outputs as a constrained-decoding engine
would: valid against the client's schema (the Draft 2020-12 subset tools and response_format use)
and the same for the same seed, so tests can assert on them. What it cannot satisfy (a `pattern`
none of its candidates match, bounds that cannot be met) raises ValueError, never an invalid value.
One value has one time budget, patterns (run on the `regex` module) included: a schema that
backtracks, or nests retries many levels deep, costs the event loop a fifth of a second at most,
then a ValueError.
"""

from __future__ import annotations

import copy
import math
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

import regex

Schema = dict[str, Any] | bool

SOFT_DEPTH = 8  # past this: minimal values (required-only objects, shortest arrays, null if allowed)
_HARD_DEPTH = 64  # past this the schema recurses with no way out
SAMPLE_BUDGET_S = 0.2  # for one value, every `pattern` match included
_LONGEST = 65_536  # characters or items: a larger minLength or minItems is not sampled
_WORDS = (
    "sunny",
    "river",
    "apple",
    "cloud",
    "maple",
    "ocean",
    "tiger",
    "lemon",
    "stone",
    "piano",
    "amber",
    "delta",
    "cedar",
    "coral",
    "eagle",
    "frost",
    "grape",
    "lunar",
    "mango",
    "north",
)
_PATTERN_TRIES = (
    "abc",
    "ABC",
    "x",
    "12345",
    "42",
    "a1b2",
    "USD",
    "2024-05-17",
    "12:30",
    "alex@example.com",
    "+15551234567",
    "555-123-4567",
    "#ff8800",
    "v1.2.3",
    "",
)
_TIGHTER: dict[str, Callable[[Any, Any], Any]] = {
    **dict.fromkeys(("minimum", "exclusiveMinimum", "minLength", "minItems"), max),
    **dict.fromkeys(("maximum", "exclusiveMaximum", "maxLength", "maxItems"), min),
}
_HINTS = (
    ("object", ("properties", "required", "additionalProperties")),
    ("array", ("items", "prefixItems")),
    ("number", ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")),
)


def _day(rng: random.Random) -> str:
    return f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


_FORMATS: dict[str, Callable[[random.Random], str]] = {
    "date-time": lambda r: f"{_day(r)}T{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:00Z",
    "date": _day,
    "time": lambda r: f"{r.randint(0, 23):02d}:30:00Z",
    "email": lambda r: f"{r.choice(_WORDS)}@example.com",
    "hostname": lambda r: f"{r.choice(_WORDS)}.example.com",
    "uuid": lambda r: str(uuid.UUID(int=r.getrandbits(128), version=4)),
    "uri": lambda r: f"https://example.com/{r.choice(_WORDS)}",
    "ipv4": lambda r: f"192.0.2.{r.randint(1, 254)}",
}


class OutOfTime(ValueError):
    pass


def sample(schema: Schema, rng: random.Random) -> Any:
    """A value valid against `schema`; `$ref`s resolve against it as the root. Deterministic in `rng`."""
    return _Sampler(schema, rng).gen(schema, 0)


def _listed(types: str | list[str]) -> list[str]:
    return [types] if isinstance(types, str) else list(types)


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """`allOf` and `$ref` siblings as one schema: properties and required unite, bounds tighten."""
    out = dict(a)
    for key, value in b.items():
        old = out.setdefault(key, value)
        if key == "properties":
            out[key] = {**old, **{n: {"allOf": [old[n], v]} if n in old else v for n, v in value.items()}}
        elif key == "required":
            out[key] = list(dict.fromkeys([*old, *value]))
        elif key in _TIGHTER:
            out[key] = _TIGHTER[key](old, value)
        elif key == "type":
            out[key] = [t for t in _listed(old) if t in _listed(value)] or value
        elif not (key == "additionalProperties" and old is False):
            out[key] = value
    return out


class _Sampler:
    def __init__(self, root: Schema, rng: random.Random) -> None:
        self.root, self.rng = root, rng
        self.deadline = time.monotonic() + SAMPLE_BUDGET_S

    def gen(self, schema: Schema, depth: int) -> Any:
        if depth > _HARD_DEPTH:
            raise ValueError("schema recursion has no finite value")
        if time.monotonic() > self.deadline:
            raise OutOfTime(f"no value found within {SAMPLE_BUDGET_S:g} s")
        s = self.flat(schema, 0)
        if "const" in s or "enum" in s:
            if not s.get("enum", [None]):
                raise ValueError("empty enum")
            return copy.deepcopy(s["const"] if "const" in s else self.rng.choice(s["enum"]))
        for key in ("anyOf", "oneOf"):  # oneOf: the first branch, which in tool schemas excludes the rest
            if key in s:
                return self.branch(s, key, depth)
        types = _listed(s.get("type", []))
        kind = (
            ("null" if depth >= SOFT_DEPTH and "null" in types else self.rng.choice(types))
            if types
            else next((kind for kind, keys in _HINTS if any(k in s for k in keys)), "string")
        )
        return getattr(self, f"make_{kind}")(s, depth)

    def flat(self, schema: Schema, hops: int) -> dict[str, Any]:
        """The schema with `$ref` resolved and `allOf` merged in, so one maker sees every constraint."""
        if hops > _HARD_DEPTH or schema is False:
            raise ValueError("schema admits no value" if schema is False else "$ref/allOf cycle")
        s = {} if schema is True else dict(schema)
        if "$ref" in s:
            s = _merge(self.flat(self.pointer(s.pop("$ref")), hops + 1), s)
        for part in s.pop("allOf", ()):
            s = _merge(s, self.flat(part, hops + 1))
        return s

    def pointer(self, ref: str) -> Schema:
        node: Any = self.root
        for part in filter(None, ref.removeprefix("#").split("/")):
            node = node.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(node, dict) else None
        if not ref.startswith("#") or node is None:
            raise ValueError(f"cannot resolve $ref {ref!r} (only local refs are supported)")
        return node

    def branch(self, s: dict[str, Any], key: str, depth: int) -> Any:
        rest = {k: v for k, v in s.items() if k != key}
        branches = [self.flat(b, 0) for b in s[key]]
        if key == "anyOf":  # any branch will do: a forced call may be to any of the tools
            self.rng.shuffle(branches)
        if depth >= SOFT_DEPTH:  # a null branch ends a recursion
            branches.sort(key=lambda b: "null" not in _listed(b.get("type", [])))
        for branch in branches:
            try:
                return self.gen(_merge(rest, branch), depth + 1)
            except OutOfTime:
                raise
            except ValueError:
                continue
        raise ValueError(f"no {key} branch can be satisfied")

    def make_object(self, s: dict[str, Any], depth: int) -> dict[str, Any]:
        required, extra = s.get("required", []), s.get("additionalProperties", True)
        out = {
            name: self.gen(sub, depth + 1)
            for name, sub in s.get("properties", {}).items()
            if name in required or (depth < SOFT_DEPTH and sub is not False and self.rng.random() < 0.75)
        }
        for name in (n for n in required if n not in out):
            if extra is False:
                raise ValueError(f"required property {name!r} is not allowed")
            out[name] = self.gen(extra, depth + 1)
        return out

    def make_array(self, s: dict[str, Any], depth: int) -> list[Any]:
        prefix, items, lo = s.get("prefixItems", []), s.get("items", True), s.get("minItems", 0)
        hi = min(s.get("maxItems", lo + 3), lo + 3, len(prefix) if items is False else lo + 3)
        if hi < lo or lo > _LONGEST:
            raise ValueError("array length bounds cannot be met")
        out: list[Any] = []
        for i in range(lo if depth >= SOFT_DEPTH else self.rng.randint(min(max(lo, 1), hi), hi)):
            tries = (self.gen(prefix[i] if i < len(prefix) else items, depth + 1) for _ in range(20))
            value = next((v for v in tries if not s.get("uniqueItems") or v not in out), out)
            if value is out:  # no new distinct item: stop, if the array is long enough
                if len(out) < lo:
                    raise ValueError("cannot make enough unique array items")
                break
            out.append(value)
        return out

    def make_string(self, s: dict[str, Any], depth: int) -> str:
        lo, hi, fmt = s.get("minLength", 0), s.get("maxLength", math.inf), _FORMATS.get(s.get("format", ""))
        if lo > hi or lo > _LONGEST:
            raise ValueError("string length bounds cannot be met")
        text = fmt(self.rng) if fmt else self.rng.choice(_WORDS)
        while len(text) < lo:
            text += " " + self.rng.choice(_WORDS)
        text = text if len(text) <= hi else text[: int(hi)]
        pattern = s.get("pattern")
        if pattern is None:
            return text
        for candidate in (text, *(f(self.rng) for f in _FORMATS.values()), *_PATTERN_TRIES, *_WORDS):
            try:
                if lo <= len(candidate) <= hi and self.matches(pattern, candidate):
                    return candidate
            except regex.error:
                break
            except TimeoutError:
                raise OutOfTime(f"no value found within {SAMPLE_BUDGET_S:g} s") from None
        raise ValueError(f"cannot produce a string matching pattern {pattern[:200]!r}")

    def matches(self, pattern: str, text: str) -> bool:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise OutOfTime(f"no value found within {SAMPLE_BUDGET_S:g} s")
        return regex.search(pattern, text, timeout=left) is not None

    def make_number(self, s: dict[str, Any], depth: int, integer: bool = False) -> int | float:
        low, high = s.get("minimum", -math.inf), s.get("maximum", math.inf)
        low_x, high_x = s.get("exclusiveMinimum", -math.inf), s.get("exclusiveMaximum", math.inf)
        lo, hi = max(low, low_x), min(high, high_x)  # the tighter bound; a tie is the exclusive one
        if not math.isfinite(lo):  # unbounded sides get a readable range
            lo = 0 if hi > 1 else hi - 100
        hi = min(hi, lo + 100)
        if integer:
            lo = math.floor(lo) + 1 if lo == low_x else math.ceil(lo)
            hi = math.ceil(hi) - 1 if hi == high_x else math.floor(hi)

        def inside(v: float) -> bool:
            return low <= v <= high and low_x < v < high_x

        if m := s.get("multipleOf"):
            kmin, kmax = math.ceil(lo / m), math.floor(hi / m)
            first = [self.rng.randint(kmin, kmax) for _ in range(8)] if kmin <= kmax else []
            for k in first + list(range(kmin, min(kmax, kmin + 99) + 1)):
                v = round(k * m, 10)
                if inside(v) and (v / m).is_integer() and (not integer or float(v).is_integer()):
                    return int(v) if integer or isinstance(m, int) else v
            raise ValueError(f"no multiple of {m} lies within the bounds")
        if integer and lo <= hi:
            return self.rng.randint(lo, hi)
        for v in (round(self.rng.uniform(lo, hi), 2), (lo + hi) / 2):
            if not integer and inside(v):
                return v
        raise ValueError("numeric bounds cannot be met")

    def make_integer(self, s: dict[str, Any], depth: int) -> int:
        return int(self.make_number(s, depth, integer=True))

    def make_boolean(self, s: dict[str, Any], depth: int) -> bool:
        return self.rng.random() < 0.5

    def make_null(self, s: dict[str, Any], depth: int) -> None:
        return None
