"""What the simulator writes when a request leaves it no choice of words: a tool call, or JSON
under a schema, in the plain `<tool_call>` form or in harmony, cut into token-sized pieces so the
parsers downstream meet it as they meet a real model's stream. Not a language model."""

from __future__ import annotations

import json
import random

from core.types import Tool
from engine.schema_sample import sample

Script = list[str | None]  # a piece of text, or None for a free word
_PIECE_CHARS = 4


def thinking(words: int) -> Script:
    return ["<|channel|>", "analysis", "<|message|>", *[None] * words, "<|end|>", "<|start|>", "assistant"]


def final_channel() -> Script:
    return ["<|channel|>", "final", "<|message|>"]


def call_script(tool: Tool, rng: random.Random, harmony: bool) -> Script:
    arguments = json.dumps(sample(tool.parameters, rng), ensure_ascii=False)
    if harmony:
        header = ["<|channel|>", f"commentary to=functions.{tool.name} ", "<|constrain|>", "json", "<|message|>"]
        return [*thinking(3), *header, *pieces(arguments), "<|call|>"]
    call = json.dumps({"name": tool.name, "arguments": json.loads(arguments)}, ensure_ascii=False)
    return [*pieces(f"<tool_call>\n{call}\n</tool_call>")]


def json_script(schema: dict | None, rng: random.Random, harmony: bool) -> Script:
    text = json.dumps(sample(schema or {"type": "object"}, rng), ensure_ascii=False)
    if harmony:
        return [*thinking(3), *final_channel(), *pieces(text), "<|return|>"]
    return pieces(text)


def pieces(text: str) -> Script:
    return [text[i : i + _PIECE_CHARS] for i in range(0, len(text), _PIECE_CHARS)]
