"""engine.schema_sample: values valid against the schemas tools and response_format send, per seed."""

from __future__ import annotations

import random
import uuid
from datetime import date, datetime

import pytest
from jsonschema import Draft202012Validator

from engine.schema_sample import sample

WEATHER = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "City and country, e.g. Paris, France"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
    },
    "required": ["location"],
}

STRICT = {  # OpenAI strict mode: every property required, no extras, nullable via a type list
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": ["integer", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["street", "zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "tags", "address"],
    "additionalProperties": False,
}

DEFS = {
    "type": "object",
    "$defs": {
        "item": {
            "type": "object",
            "properties": {
                "sku": {"type": "string", "minLength": 3},
                "qty": {"type": "integer", "exclusiveMinimum": 0},
            },
            "required": ["sku", "qty"],
            "additionalProperties": False,
        },
        "money": {"type": "number", "minimum": 0, "multipleOf": 0.01},
    },
    "properties": {
        "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 1},
        "total": {"$ref": "#/$defs/money"},
    },
    "required": ["items", "total"],
    "additionalProperties": False,
}

TREE = {  # recursive through $ref: the depth guard must end it
    "definitions": {
        "node": {
            "type": "object",
            "properties": {
                "label": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/definitions/node"}},
                "parent": {"anyOf": [{"$ref": "#/definitions/node"}, {"type": "null"}]},
            },
            "required": ["label", "children", "parent"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/definitions/node",
}

SCHEMAS: dict[str, object] = {
    "weather": WEATHER,
    "strict": STRICT,
    "defs": DEFS,
    "tree": TREE,
    "no_params": {"type": "object", "properties": {}, "additionalProperties": False},
    "empty": {},
    "true": True,
    "nullable_anyof": {
        "type": "object",
        "properties": {"note": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
        "required": ["note"],
    },
    "array_of_objects": {
        "type": "array",
        "minItems": 2,
        "maxItems": 4,
        "items": {
            "type": "object",
            "properties": {"id": {"type": "integer"}, "ok": {"type": "boolean"}},
            "required": ["id", "ok"],
        },
    },
    "enum_const": {
        "type": "object",
        "properties": {
            "kind": {"const": "search"},
            "level": {"enum": [1, 2, 3]},
            "mode": {"type": "string", "enum": ["fast", "deep"]},
        },
        "required": ["kind", "level", "mode"],
    },
    "bounds": {
        "type": "object",
        "properties": {
            "pct": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "neg": {"type": "integer", "maximum": -5},
            "even": {"type": "integer", "minimum": 3, "maximum": 11, "multipleOf": 2},
            "half": {"type": "number", "minimum": 0.25, "maximum": 2, "multipleOf": 0.25},
            "tight": {"type": "integer", "exclusiveMinimum": 4.5, "exclusiveMaximum": 6},
        },
        "required": ["pct", "neg", "even", "half", "tight"],
    },
    "strings": {
        "type": "object",
        "properties": {
            "short": {"type": "string", "maxLength": 3},
            "long": {"type": "string", "minLength": 20, "maxLength": 24},
            "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "slug": {"type": "string", "pattern": "^[a-z]+$"},
            "when": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "mail": {"type": "string", "format": "email"},
            "id": {"type": "string", "format": "uuid"},
            "link": {"type": "string", "format": "uri"},
        },
        "required": ["short", "long", "code", "slug", "when", "day", "mail", "id", "link"],
    },
    "tuple": {
        "type": "array",
        "prefixItems": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}],
        "items": False,
        "minItems": 2,
    },
    "unique": {"type": "array", "items": {"enum": ["a", "b", "c", "d"]}, "minItems": 3, "uniqueItems": True},
    "type_list": {"type": ["string", "integer", "boolean", "null"]},
    "oneof": {
        "oneOf": [
            {
                "type": "object",
                "properties": {"op": {"const": "add"}, "n": {"type": "integer"}},
                "required": ["op", "n"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "properties": {"op": {"const": "reset"}},
                "required": ["op"],
                "additionalProperties": False,
            },
        ]
    },
    "allof": {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"properties": {"b": {"type": "integer", "minimum": 10}, "a": {"maxLength": 4}}, "required": ["b"]},
        ]
    },
    "anyof_first_impossible": {"anyOf": [{"type": "string", "pattern": "^[a-z]{40}$"}, {"type": "integer"}]},
    "ref_with_siblings": {
        "$defs": {"base": {"type": "object", "properties": {"x": {"type": "integer"}}}},
        "$ref": "#/$defs/base",
        "required": ["x"],
    },
    "numbers_more": {
        "type": "object",
        "properties": {
            "tenth": {"type": "number", "multipleOf": 0.1},
            "below": {"type": "integer", "exclusiveMaximum": 0},
            "sliver": {"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 1.0001},
            "big": {"type": "number", "minimum": 1e6},
            "halves": {"type": "integer", "minimum": 1, "multipleOf": 0.5},
        },
        "required": ["tenth", "below", "sliver", "big", "halves"],
    },
    "map": {"type": "object", "additionalProperties": {"type": "integer"}, "required": ["k"]},
    "nullable_object": {"type": ["null", "object"], "properties": {"q": {"type": "string", "format": "date"}}},
    "escaped_ref": {"$defs": {"a/b": {"type": "integer"}}, "$ref": "#/$defs/a~1b"},
    "untyped_hints": {
        "properties": {"n": {"minimum": 2, "maximum": 3}, "xs": {"items": {"type": "null"}}},
        "required": ["n", "xs"],
    },
}


def check(schema: object, value: object) -> None:
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    errors = [e.message for e in validator.iter_errors(value)]
    assert not errors, (value, errors)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_values_validate_across_seeds(name: str) -> None:
    schema = SCHEMAS[name]
    Draft202012Validator.check_schema(schema)
    for seed in range(50):
        check(schema, sample(schema, random.Random(seed)))


@pytest.mark.parametrize("seed", range(200))
def test_property_every_schema_every_seed(seed: int) -> None:
    """Property test without hypothesis: one rng threads through all schemas, so seeds mix."""
    rng = random.Random(seed)
    for schema in SCHEMAS.values():
        check(schema, sample(schema, rng))


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_same_seed_same_value(name: str) -> None:
    schema = SCHEMAS[name]
    assert sample(schema, random.Random(7)) == sample(schema, random.Random(7))


def test_seeds_vary_the_value() -> None:
    values = {repr(sample(WEATHER, random.Random(seed))) for seed in range(20)}
    assert len(values) > 5


def test_required_always_filled_and_no_extras() -> None:
    for seed in range(50):
        value = sample(STRICT, random.Random(seed))
        assert set(value) == {"name", "age", "tags", "address"}
        assert set(value["address"]) == {"street", "zip"}
        assert "location" in sample(WEATHER, random.Random(seed))


def test_optional_properties_are_sometimes_filled() -> None:
    seen = set().union(*(sample(WEATHER, random.Random(seed)) for seed in range(50)))
    assert seen == {"location", "unit", "days"}


def test_formats_are_real_values() -> None:
    value = sample(SCHEMAS["strings"], random.Random(3))
    datetime.fromisoformat(value["when"].replace("Z", "+00:00"))
    date.fromisoformat(value["day"])
    assert uuid.UUID(value["id"]).version == 4
    assert value["link"].startswith("https://") and "@" in value["mail"]


def test_float_multiple_of_varies() -> None:
    values = {sample({"type": "number", "multipleOf": 0.1}, random.Random(seed)) for seed in range(20)}
    assert len(values) > 10


def test_oneof_matches_exactly_one_branch() -> None:
    schema = SCHEMAS["oneof"]
    for seed in range(20):
        value = sample(schema, random.Random(seed))
        assert sum(Draft202012Validator(b).is_valid(value) for b in schema["oneOf"]) == 1


def test_recursion_is_bounded() -> None:
    def depth(node: dict) -> int:
        below = [depth(c) for c in node["children"]] + ([depth(node["parent"])] if node["parent"] else [])
        return 1 + max(below, default=0)

    for seed in range(20):
        assert depth(sample(TREE, random.Random(seed))) <= 10


def test_empty_schema_gives_a_short_string() -> None:
    for schema in ({}, True):
        value = sample(schema, random.Random(0))
        assert isinstance(value, str) and 0 < len(value) <= 12


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "^[a-z]{40}$"},
        {
            "type": "object",
            "properties": {"sig": {"type": "string", "pattern": "^0x[0-9a-f]{64}$"}},
            "required": ["sig"],
        },
    ],
)
def test_unsatisfiable_pattern_raises_naming_it(schema: dict) -> None:
    with pytest.raises(ValueError, match="pattern"):
        sample(schema, random.Random(0))


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "minimum": 5, "maximum": 4},
        {"type": "integer", "minimum": 1, "maximum": 3, "multipleOf": 5},
        {"type": "array", "minItems": 3, "maxItems": 1},
        {"type": "object", "properties": {}, "required": ["x"], "additionalProperties": False},
        {"type": "string", "minLength": 5, "maxLength": 2},
        {"type": "array", "items": {"enum": [1, 2]}, "minItems": 3, "uniqueItems": True},
        {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]},  # no finite value
        {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        {"$ref": "#/$defs/missing"},
        {"$ref": "other.json#/x"},
        False,
    ],
)
def test_unsatisfiable_schemas_raise(schema: object) -> None:
    with pytest.raises(ValueError):
        sample(schema, random.Random(0))
