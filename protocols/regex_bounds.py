"""Patterns in a request's JSON schemas (`pattern`, `patternProperties`), refused by construct
before any engine compiles or matches them: a repeat whose every iteration may be nothing but
another unbounded repeat (`(a+)+`, `([a-z]+ ?)*`) can split one value in exponentially many ways
for a backtracking matcher, and a counted repeat in the thousands makes an automaton of that many
states. Repeats that each start with something required (`( [A-Z][a-z]+)*`) are not ambiguous and
pass. Read with Python's own regular-expression parser; no match is ever run here. Pure."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from re import _constants as sre_constants  # type: ignore[attr-defined]
from re import _parser as sre_parser  # type: ignore[attr-defined]
from typing import Any

MAX_PATTERN_CHARS = 1000
MAX_COUNT = 1000  # the most repeats a pattern may count to, nested counts multiplied ((a{100}){100} is 10,000)
_REPEATS = {sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, getattr(sre_constants, "POSSESSIVE_REPEAT", None)}


@functools.lru_cache(maxsize=4096)
def pattern_problem(pattern: str) -> str | None:
    """Why `pattern` is refused, or None (cached: an agent sends the same schemas every turn)."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"is {len(pattern)} characters long; at most {MAX_PATTERN_CHARS} are taken"
    try:
        tree = sre_parser.parse(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        return f"is not a regular expression: {exc}"
    stack: list[tuple[Any, int]] = [(tree, 1)]  # (part, the repeats its enclosing counts multiply to)
    while stack:
        node, times = stack.pop()
        for op, arg in node:
            if op in _REPEATS:
                low, high, inner = arg
                unbounded = high == sre_constants.MAXREPEAT
                if unbounded and _only_a_repeat(inner):
                    return (
                        "repeats an unbounded repeat with nothing else required (as (a+)+ does), which can "
                        "take a matcher exponential time"
                    )
                counted = times * max(1, low if unbounded else high)
                if counted > MAX_COUNT:
                    return f"counts to {counted} repeats (nested counts multiplied); at most {MAX_COUNT} are taken"
                stack.append((inner, counted))
            else:
                stack.extend((child, times) for child in _children(op, arg))
    return None


def _only_a_repeat(body: Any) -> bool:
    """Whether one iteration of `body` may be an unbounded repeat and nothing else."""
    items = list(body)
    while len(items) == 1 and items[0][0] is sre_constants.SUBPATTERN:
        items = list(items[0][1][-1])
    repeats = [a for op, a in items if op in _REPEATS and a[1] == sre_constants.MAXREPEAT]
    optional = [a for op, a in items if op in _REPEATS and a[0] == 0]
    return bool(repeats) and len(items) == len({id(a) for a in repeats + optional})


def _children(op: Any, arg: Any) -> Iterator[Any]:
    if op is sre_constants.SUBPATTERN:
        yield arg[-1]
    elif op is sre_constants.BRANCH:
        yield from arg[1]
    elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
        yield arg[1]
    elif op is sre_constants.GROUPREF_EXISTS:
        yield from (p for p in arg[1:] if p is not None)
    elif op is getattr(sre_constants, "ATOMIC_GROUP", None):
        yield arg


def schema_patterns(schema: Any) -> Iterator[str]:
    """Every pattern a schema holds, at any depth (the depth is bounded before this runs)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                yield node["pattern"]
            if isinstance(node.get("patternProperties"), dict):
                yield from (key for key in node["patternProperties"] if isinstance(key, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
