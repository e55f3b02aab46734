"""Cut the response schemas the tests check against out of OpenAI's published OpenAPI document.

Usage: python scripts/openai-schemas.py path/to/openapi.json > tests/api/fixtures/openai-response-schemas.json
(openapi.json from github.com/openai/openai-openapi). Descriptions are dropped; the rest is kept as published,
so the tests hold us to OpenAI's shapes without a download at test time. OpenAPI 3.0's `nullable: true`,
which the document still uses in places, becomes JSON Schema's `anyOf: [..., {type: null}]`.
"""

import json
import sys
from typing import Any

ROOTS = (
    "CreateChatCompletionResponse",
    "CreateChatCompletionStreamResponse",
    "ListModelsResponse",
    "ErrorResponse",
    "Response",
    "ResponseStreamEvent",
    "ResponseItemList",
)
DROPPED = {"description", "example", "examples", "x-stainless-const", "deprecated", "title"}


def strip(node: Any) -> Any:
    if isinstance(node, dict):
        kept = {key: strip(value) for key, value in node.items() if key not in DROPPED | {"nullable"}}
        return {"anyOf": [kept, {"type": "null"}]} if node.get("nullable") else kept
    if isinstance(node, list):
        return [strip(item) for item in node]
    return node


def referenced(schemas: dict[str, Any], roots: tuple[str, ...]) -> set[str]:
    found: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        todo.extend(ref.rsplit("/", 1)[-1] for ref in refs(schemas[name]))
    return found


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if "$ref" in node else []
        return own + [ref for value in node.values() for ref in refs(value)]
    if isinstance(node, list):
        return [ref for item in node for ref in refs(item)]
    return []


def main(path: str) -> None:
    spec = json.load(open(path))
    schemas = spec["components"]["schemas"]
    kept = {name: strip(schemas[name]) for name in sorted(referenced(schemas, ROOTS))}
    json.dump({"openapi_version": spec["info"]["version"], "components": {"schemas": kept}}, sys.stdout, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
