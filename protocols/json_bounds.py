"""How deep and how large the JSON a request carries may be, checked on the parsed body before any
library reads it: jsonschema, pydantic and a chat template all recurse, so a schema nested a few
hundred levels deep would end in a RecursionError (a 500 and a traceback per request), and a large
schema costs the event loop a tenth of a second to check. Iterative, so no input can recurse here."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from protocols.regex_bounds import pattern_problem, schema_patterns

ENVELOPE_DEPTH = 8  # the levels a body wraps a schema in: tools[0].function.parameters is 4
SCHEMA_PLACES = (
    ("tools", "*", "function", "parameters"),
    ("tools", "*", "parameters"),
    ("response_format", "json_schema", "schema"),
    ("text", "format", "schema"),
    ("tools", "*", "input_schema"),
    ("output_config", "format", "schema"),
    ("format",),
)  # input_schema and output_config: Anthropic's; a top-level format: Ollama's
KWARGS_PLACES = (("chat_template_kwargs",),)


class BoundError(ValueError):
    def __init__(self, param: str | None, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class JsonBounds:
    max_depth: int = 32
    max_schema_bytes: int = 65_536

    def check(self, body: dict[str, Any]) -> int:
        """Raises BoundError naming the field; returns the bytes of the schemas the body carries."""
        for param, value in found(body, KWARGS_PLACES):
            self._check_depth(value, param, self.max_depth, param)
        total = 0
        for param, schema in found(body, SCHEMA_PLACES):
            self._check_depth(schema, param, self.max_depth, "a JSON schema")
            total += len(json.dumps(schema, ensure_ascii=False).encode())
            if total > self.max_schema_bytes:
                raise BoundError(
                    param,
                    f"the JSON schemas of this request come to more than {self.max_schema_bytes} "
                    f"bytes (server.max_schema_bytes), at {param}",
                )
            for pattern in schema_patterns(schema):
                if (problem := pattern_problem(pattern)) is not None:
                    raise BoundError(param, f"the pattern {json.dumps(pattern)[:120]} in {param} {problem}")
        self._check_depth(body, None, self.max_depth + ENVELOPE_DEPTH, "a field of a request body")
        return total

    @staticmethod
    def _check_depth(value: Any, param: str | None, limit: int, what: str) -> None:
        fields = value.items() if param is None and isinstance(value, dict) else [(param, value)]
        for name, field in fields:
            if depth(field, limit) > limit:
                raise BoundError(
                    name, f"{what} may nest at most {limit} levels (from server.max_json_depth); {name} nests deeper"
                )


def depth(value: Any, stop: int) -> int:
    """The nesting depth of `value` (a scalar is 0, `[]` and `{}` are 1), counted level by level
    until it passes `stop`: a comprehension per level keeps a 1 MiB body of lists in milliseconds."""
    level, found = [value], 0
    while found <= stop:
        level = (
            [
                child
                for node in level
                for child in (node.values() if isinstance(node, dict) else node)
                if isinstance(child, (dict, list))
            ]
            if found
            else [v for v in level if isinstance(v, (dict, list))]
        )
        if not level:
            return found
        found += 1
    return found


def found(body: dict[str, Any], places: tuple[tuple[str, ...], ...]) -> Iterator[tuple[str, Any]]:
    """(param, value) at each place present; `*` walks a list. Wrong shapes are pydantic's to report."""
    for place in places:
        nodes: list[tuple[str, Any]] = [("", body)]
        for step in place:
            nodes = list(_step(nodes, step))
        yield from ((param, value) for param, value in nodes if value is not None)


def _step(nodes: list[tuple[str, Any]], step: str) -> Iterator[tuple[str, Any]]:
    for param, node in nodes:
        if step == "*" and isinstance(node, list):
            yield from ((f"{param}[{i}]", item) for i, item in enumerate(node))
        elif step != "*" and isinstance(node, dict) and step in node:
            yield (f"{param}.{step}" if param else step, node[step])
