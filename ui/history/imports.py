"""Reading an import: our JSON export or ChatGPT's `conversations.json`, every field checked
before anything is stored, so that a file comes in whole (HistoryStore.import_conversations) or is
refused with an ImportProblem: a message key and its values that the page words in the reader's
language, never Python's own text. Only what the page itself writes is kept: unknown keys of a
message's details or of the settings are dropped, a known one of the wrong type refuses the file."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conversations.records import OUTCOMES, ROLES, Imported, ImportProblem, StoredMessage
from conversations.store import HistoryStore
from settings.schema import HistoryConfig
from ui.i18n import message

log = logging.getLogger("gpt_oss_webui.history")

FORMAT = "gpt-oss-webui.conversations"
TEXT_CHARS = 1_000_000  # a message's content or reasoning: more than any model's context holds
SHORT_CHARS = 10_000  # a title, a reason, a setting's or a detail's text
LATEST = 253_402_300_799  # 9999-12-31 23:59:59 UTC: a later timestamp is no real time
_READ_ERRORS = (TypeError, AttributeError, KeyError, ValueError, RecursionError, OverflowError)

Check = Callable[[Any, str], Any]


class _Bad(Exception):
    """A field of one conversation; parse_import adds which conversation of the file it is."""

    def __init__(self, code: str, **values: object) -> None:
        super().__init__(code)
        self.code, self.values = code, values


@dataclass(frozen=True, slots=True)
class Limits:
    conversations: int = 1000
    messages: int = 1000

    @classmethod
    def of(cls, config: HistoryConfig) -> Limits:
        return cls(config.max_conversations, config.max_messages)


def describe(problem: ImportProblem, lang: str) -> str:
    """The refusal as the page shows it, in the reader's language."""
    return message(lang, "import_failed", problem=message(lang, "import_" + problem.code, **problem.values))


async def import_file(store: HistoryStore, owner: str, data: bytes) -> int:
    """Parses and stores a file whole: how many conversations came in, or an ImportProblem (the
    store then holds exactly what it held before)."""
    found = await asyncio.to_thread(parse_import, data, Limits.of(store.config))  # up to 50 MiB: off the event loop
    try:
        await store.import_conversations(owner, found)
    except sqlite3.Error as exc:
        log.error("an import of %d conversation(s) was not written: %s", len(found), exc)
        raise ImportProblem("not_written") from None
    return len(found)


def parse_import(data: bytes, limits: Limits = Limits()) -> list[Imported]:
    """Ours, or ChatGPT's export; anything else is an ImportProblem."""
    body = _json(data)
    read: Callable[[Any, Limits], Imported]
    if isinstance(body, dict) and body.get("format") == FORMAT:
        items, read = body.get("conversations"), _ours
        if not isinstance(items, list):
            raise ImportProblem("bad_file_field", field="conversations")
    elif isinstance(body, list) and all(isinstance(c, dict) and "mapping" in c for c in body):
        items, read = body, _chatgpt
    else:
        raise ImportProblem("unknown_format")
    if len(items) > limits.conversations:
        raise ImportProblem("too_many_conversations", n=len(items), limit=limits.conversations)
    found = [_one(read, c, n, limits) for n, c in enumerate(items, 1)]
    return found if read is _ours else [c for c in found if c.messages]


def _json(data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8-sig"))
    except RecursionError:
        raise ImportProblem("too_deep") from None
    except ValueError:  # not UTF-8, not JSON, or an integer of more digits than Python reads
        raise ImportProblem("not_json") from None


def _one(read: Callable[[Any, Limits], Imported], c: Any, n: int, limits: Limits) -> Imported:
    """The n-th conversation of the file (from 1), or the problem naming it and the field."""
    try:
        return read(c, limits)
    except _Bad as bad:
        raise ImportProblem(bad.code, conversation=n, **bad.values) from None
    except _READ_ERRORS:  # a shape no check foresaw: still the conversation's number, not Python's text
        raise ImportProblem("unreadable", conversation=n) from None


def _ours(c: Any, limits: Limits) -> Imported:
    if not isinstance(c, dict):
        raise _Bad("bad_field", field="conversation")
    raw = c.get("messages")
    if not isinstance(raw, list):
        raise _Bad("bad_field", field="messages")
    if len(raw) > limits.messages:
        raise _Bad("too_many_messages", n=len(raw), limit=limits.messages)
    messages = [_message(m, f"messages[{i}]") for i, m in enumerate(raw)]
    first = next((m.content for m in messages if m.role == "user"), "")
    title = _SHORT(c.get("title"), "title") or first or "imported"
    return Imported(title, _settings(c.get("settings")), messages, _time(c.get("created"), "created"))


def _message(m: Any, at: str) -> StoredMessage:
    if not isinstance(m, dict):
        raise _Bad("bad_field", field=at)
    role, outcome = m.get("role"), _SHORT(m.get("outcome"), at + ".outcome")
    if not isinstance(role, str) or role not in ROLES:
        raise _Bad("bad_field", field=at + ".role")
    if outcome not in OUTCOMES:
        raise _Bad("bad_field", field=at + ".outcome")
    return StoredMessage(
        role,
        _LONG(m.get("content"), at + ".content"),
        _LONG_OR_NOT(m.get("reasoning"), at + ".reasoning"),
        _known(_DETAILS, m.get("details"), at + ".details"),
        outcome,
        _SHORT(m.get("reason"), at + ".reason"),
        _time(m.get("created"), at + ".created") or 0.0,
    )


def _chatgpt(c: Any, limits: Limits) -> Imported:
    """The branch ChatGPT shows (current_node back to the root), its text messages only; `c` is an
    object with a mapping (parse_import checked)."""
    mapping = c.get("mapping")
    if not isinstance(mapping, dict) or not all(v is None or isinstance(v, dict) for v in mapping.values()):
        raise _Bad("bad_field", field="mapping")
    branch = _branch(mapping, c.get("current_node"))
    messages = [m for m in (_chatgpt_message(node.get("message")) for node in branch) if m is not None]
    if len(messages) > limits.messages:
        raise _Bad("too_many_messages", n=len(messages), limit=limits.messages)
    title = _SHORT(c.get("title"), "title")
    return Imported(
        title or (messages[0].content if messages else "imported"),
        {},
        messages,
        _time(c.get("create_time"), "create_time"),
    )


def _branch(mapping: dict[str, dict | None], node_id: Any) -> list[dict]:
    """Root first; without a current node, the branch of the last leaf."""
    if not isinstance(node_id, str) or node_id not in mapping:
        node_id = next((k for k, v in reversed(mapping.items()) if not (v or {}).get("children")), None)
    chain: list[dict] = []
    seen: set[str] = set()
    while isinstance(node_id, str) and node_id in mapping and node_id not in seen:
        seen.add(node_id)
        node = mapping[node_id] or {}
        chain.append(node)
        node_id = node.get("parent")
    return chain[::-1]


def _chatgpt_message(m: Any) -> StoredMessage | None:
    if m is None:
        return None
    at = "mapping[…].message"
    author, content = (m.get("author") or {}, m.get("content") or {}) if isinstance(m, dict) else (None, None)
    if not isinstance(author, dict) or not isinstance(content, dict):
        raise _Bad("bad_field", field=at)
    parts = content.get("parts") if content.get("content_type") in ("text", "multimodal_text") else []
    if not isinstance(parts, list):
        raise _Bad("bad_field", field=at + ".content.parts")
    text = _LONG("".join(p for p in parts if isinstance(p, str)).strip(), at + ".content.parts")
    role, created = author.get("role"), _time(m.get("create_time"), at + ".create_time")
    if not isinstance(role, str) or role not in ROLES or not text:
        return None
    return StoredMessage(role, text, outcome="done" if role == "assistant" else "", created=created or 0.0)


def _known(checks: dict[str, Check], value: Any, at: str) -> dict[str, Any]:
    """The keys the page writes, each checked; other keys dropped."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Bad("bad_field", field=at)
    return {key: check(value[key], f"{at}.{key}") for key, check in checks.items() if key in value}


def _settings(value: Any) -> dict[str, Any]:
    return _known(_SETTINGS, value, "settings")


def _text(limit: int, optional: bool = False) -> Check:
    def check(value: Any, field: str) -> Any:
        if value is None and optional:
            return ""
        if not isinstance(value, str):
            raise _Bad("bad_field", field=field)
        if len(value) > limit:
            raise _Bad("too_long", field=field, limit=limit)
        return value

    return check


def _number(low: float, high: float, whole: bool = False, optional: bool = False) -> Check:
    """Finite and within [low, high] (NaN, inf and 1e400 are not); never a bool."""

    def check(value: Any, field: str) -> Any:
        if value is None and optional:
            return None
        kinds = (int,) if whole else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or not low <= value <= high:
            raise _Bad("bad_field", field=field)
        return value if whole else float(value)

    return check


def _choice(*allowed: str) -> Check:
    def check(value: Any, field: str) -> str:
        if not isinstance(value, str) or value not in allowed:
            raise _Bad("bad_field", field=field)
        return value

    return check


def _flag(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise _Bad("bad_field", field=field)
    return value


def _time(value: Any, field: str) -> float | None:
    """Seconds since 1970; None where the file has none (0 included, as older exports wrote it)."""
    return _TIME(value, field) or None


_LONG, _LONG_OR_NOT, _SHORT = _text(TEXT_CHARS), _text(TEXT_CHARS, optional=True), _text(SHORT_CHARS, optional=True)
_TIME = _number(0, LATEST, optional=True)


_DETAILS: dict[str, Check] = {  # as ui.chat.views.answer_details writes them
    "caller": _text(SHORT_CHARS),
    "class": _text(SHORT_CHARS),
    "finish_reason": _text(SHORT_CHARS, optional=True),
    "wait_s": _number(0, 1e9),
    "tokens": _number(0, 10**12, whole=True),
    "tokens_per_s": _number(0, 1e9, optional=True),
    "cached": _flag,
    "similarity": _number(-2, 2, optional=True),
}
_SETTINGS: dict[str, Check] = {  # ui.chat.chat_settings.ChatSettings, within the page's own fields' ranges
    "system_prompt": _text(TEXT_CHARS),
    "priority": _choice("high", "medium", "low"),
    "reasoning_effort": _choice("low", "medium", "high"),
    "max_tokens": _number(1, 10**7, whole=True),
    "temperature": _number(0, 2),
    "top_p": _number(0, 1),
    "timeout_s": _number(1, 10**6),
}
