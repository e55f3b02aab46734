"""Patterns refused by construct: the ambiguous nestings a backtracking matcher takes exponential
time on, and huge counts; the nestings that are not ambiguous pass."""

from __future__ import annotations

import pytest

from protocols.json_bounds import BoundError, JsonBounds
from protocols.regex_bounds import pattern_problem, schema_patterns


@pytest.mark.parametrize("pattern", ["^([a-z ]+)+!$", "(a*)*", "(?:a+)+", "((a+))*", "([a-z]+ ?)+", "(x{2,})+"])
def test_a_repeat_of_nothing_but_an_unbounded_repeat_is_refused(pattern: str) -> None:
    assert "exponential" in (pattern_problem(pattern) or "")


@pytest.mark.parametrize(
    "pattern",
    ["^[A-Z][a-z]+( [A-Z][a-z]+)*$", "((ab)+c)+", "(\\d{3}-)+", "^(a|b)+$", "^\\d{3}-\\d{4}$", "(?=a+)b", "x{2,1000}"],
)
def test_nestings_that_are_not_ambiguous_pass(pattern: str) -> None:
    assert pattern_problem(pattern) is None


def test_huge_counts_long_patterns_and_non_patterns_are_refused() -> None:
    assert "counts to 5000" in (pattern_problem("a{5000}") or "")
    assert "counts to 4294967294" in (pattern_problem("a{4294967294,}") or "")  # an open repeat's least count
    assert "nested counts multiplied" in (pattern_problem("((a{100}){100})") or "")
    assert pattern_problem("(\\d{3}-){10}") is None
    assert "characters long" in (pattern_problem("a" * 1001) or "")
    assert "not a regular expression" in (pattern_problem("[") or "")


def test_every_pattern_of_a_schema_is_found_at_any_depth() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "string", "pattern": "^x$"},
            "pattern": {"type": "array", "items": {"pattern": "^y$"}},
        },
        "patternProperties": {"^z": {"type": "string"}},
    }
    assert sorted(schema_patterns(schema)) == ["^x$", "^y$", "^z"]


@pytest.mark.parametrize(
    "body, param",
    [
        (
            {"tools": [{"name": "f", "input_schema": {"type": "object", "properties": {"s": {"pattern": "(a+)+"}}}}]},
            "tools[0].input_schema",
        ),
        (
            {"output_config": {"format": {"type": "json_schema", "schema": {"type": "string", "pattern": "(a+)+"}}}},
            "output_config.format.schema",
        ),
        (
            {"text": {"format": {"type": "json_schema", "schema": {"$defs": {"x": {"pattern": "a{2000}"}}}}}},
            "text.format.schema",
        ),
    ],
)
def test_every_wire_formats_schemas_are_read_for_patterns(body: dict, param: str) -> None:
    with pytest.raises(BoundError) as refused:
        JsonBounds().check(body)
    assert refused.value.param == param
