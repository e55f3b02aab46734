"""Lone surrogates: JSON may escape one (\\ud800), and no store, tokenizer or encoder takes it, so
every body that is kept or run is checked for them before anything runs."""

from __future__ import annotations

import re

ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")  # JSON's escape of a surrogate, paired or not


def lone_surrogate_at(data: object) -> str | None:
    """Where the first text that will not encode sits (`messages.0.content`; "" for a field
    name at the top), or None when all of it encodes."""
    stack: list[tuple[str, object]] = [("", data)]
    while stack:
        where, value = stack.pop()
        bad = isinstance(value, str) and not _encodes(value)
        if isinstance(value, dict):
            bad = not all(_encodes(str(key)) for key in value)
            stack.extend((f"{where}.{key}" if where else str(key), item) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((f"{where}.{i}", item) for i, item in enumerate(value))
        if bad:
            return where
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
