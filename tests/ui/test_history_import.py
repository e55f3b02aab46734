"""Imports on a real SQLite file, the whole way a page's upload goes (import_file): a malformed file
of any kind is refused with a message in the reader's language, never Python's text, and leaves
the store exactly as it was; an import that would push out earlier conversations is refused with
how many; a good file of ours or ChatGPT's comes in and exports back, "Export all" included."""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import conversations.store as store_module
import ui.history.imports as imports_module
from conversations.records import Conversation
from conversations.store import HistoryStore
from tests.conversations.test_store import chat, opened
from ui.history.export import to_json, to_markdown
from ui.history.imports import TEXT_CHARS, ImportProblem, Limits, _one, describe, import_file, parse_import

OWNER = "key:alice"
DETAILS = {
    "caller": "alice",
    "class": "high",
    "wait_s": 1.25,
    "tokens": 12,
    "tokens_per_s": 30.5,
    "cached": False,
    "finish_reason": "stop",
}


def ours(*conversations: dict) -> bytes:
    return json.dumps(
        {"format": "gpt-oss-webui.conversations", "version": 1, "conversations": list(conversations)}
    ).encode()


def good(title: str = "Heaps", **changes: Any) -> dict:
    return {
        "title": title,
        "created": 1_700_000_000.0,
        "settings": {"system_prompt": "be brief", "temperature": 1},
        "messages": [
            {"role": "user", "content": "What is a heap?", "created": 1_700_000_001.0},
            {
                "role": "assistant",
                "content": "A tree in an array.",
                "reasoning": "short",
                "details": DETAILS,
                "outcome": "done",
                "reason": "",
                "created": 1_700_000_002.0,
            },
        ],
        **changes,
    }


def with_message(index: int, **changes: Any) -> dict:
    conversation = good()
    conversation["messages"][index] = {**conversation["messages"][index], **changes}
    return conversation


@pytest.fixture
async def open_store() -> AsyncIterator[Callable[..., Awaitable[HistoryStore]]]:
    """opened(), and closed after the test even when it fails (an open connection's thread would
    keep pytest from exiting)."""
    stores: list[HistoryStore] = []

    async def make(path: Path, **limits: int) -> HistoryStore:
        stores.append(await opened(path, **limits))
        return stores[-1]

    yield make
    for store in stores:
        await store.close()


def committed(path: Path) -> tuple[list, list]:
    """Every committed row in the file (another connection sees nothing uncommitted)."""
    raw = sqlite3.connect(path)
    try:
        return (
            raw.execute("SELECT * FROM conversations ORDER BY id").fetchall(),
            raw.execute("SELECT * FROM messages ORDER BY id").fetchall(),
        )
    finally:
        raw.close()


async def seen(store: HistoryStore, owner: str = OWNER) -> list[tuple]:
    listed = await store.list(owner, limit=10_000)
    return [(s.id, s.title, len((await store.get(owner, s.id)).messages)) for s in listed]


async def export_all(store: HistoryStore, owner: str = OWNER) -> list[Conversation]:
    """What the sidebar's Export all reads."""
    return [c for c in [await store.get(owner, s.id) for s in await store.list(owner)] if c is not None]


async def refused(store: HistoryStore, path: Path, data: bytes) -> ImportProblem:
    """The problem, once checked that the file and the store's own connection (which would see an
    uncommitted half) hold what they held, and that the next write commits nothing of it."""
    before, shown = committed(path), await seen(store)
    with pytest.raises(ImportProblem) as caught:
        await import_file(store, OWNER, data)
    assert committed(path) == before and await seen(store) == shown
    await store.create(f"key:later-{uuid.uuid4().hex}", "a later write", {})  # an owner with room
    conversations, messages = committed(path)
    assert len(conversations) == len(before[0]) + 1 and messages == before[1] and await seen(store) == shown
    return caught.value


BAD = [  # (file, code, values)
    (b"\xff\xfe not text", "not_json", {}),
    (b"{'single': 'quotes'}", "not_json", {}),
    (b"[" * 100_000, "too_deep", {}),
    (b'{"created": ' + b"9" * 5000 + b"}", "not_json", {}),  # more digits than Python reads
    (json.dumps({"conversations": []}).encode(), "unknown_format", {}),
    (json.dumps({"format": "gpt-oss-webui.conversations"}).encode(), "bad_file_field", {"field": "conversations"}),
    (ours([good()]), "bad_field", {"conversation": 1, "field": "conversation"}),  # a list where an object belongs
    (ours(good(title=5)), "bad_field", {"conversation": 1, "field": "title"}),
    (ours(good(settings=["be brief"])), "bad_field", {"conversation": 1, "field": "settings"}),
    (ours(good(settings={"temperature": "hot"})), "bad_field", {"conversation": 1, "field": "settings.temperature"}),
    (ours(good(settings={"priority": "urgent"})), "bad_field", {"conversation": 1, "field": "settings.priority"}),
    (ours(good(messages={"role": "user"})), "bad_field", {"conversation": 1, "field": "messages"}),
    (ours({"title": "no messages"}), "bad_field", {"conversation": 1, "field": "messages"}),
    (ours(good(messages=[["user", "hi"]])), "bad_field", {"conversation": 1, "field": "messages[0]"}),
    (ours(with_message(0, role="system")), "bad_field", {"conversation": 1, "field": "messages[0].role"}),
    (ours(with_message(0, role=["user"])), "bad_field", {"conversation": 1, "field": "messages[0].role"}),
    (ours(with_message(0, content=None)), "bad_field", {"conversation": 1, "field": "messages[0].content"}),
    (ours(with_message(0, content={"text": "hi"})), "bad_field", {"conversation": 1, "field": "messages[0].content"}),
    (ours(with_message(1, outcome="exploded")), "bad_field", {"conversation": 1, "field": "messages[1].outcome"}),
    (ours(with_message(1, details=[1, 2])), "bad_field", {"conversation": 1, "field": "messages[1].details"}),
    (
        ours(with_message(1, details={**DETAILS, "tokens": "many"})),
        "bad_field",
        {"conversation": 1, "field": "messages[1].details.tokens"},
    ),
    (
        ours(with_message(1, details={**DETAILS, "cached": 1})),
        "bad_field",
        {"conversation": 1, "field": "messages[1].details.cached"},
    ),
    (
        ours(with_message(1, details={**DETAILS, "similarity": "high"})),
        "bad_field",
        {"conversation": 1, "field": "messages[1].details.similarity"},
    ),
    (ours(good(created="yesterday")), "bad_field", {"conversation": 1, "field": "created"}),
    (ours(good(created=True)), "bad_field", {"conversation": 1, "field": "created"}),
    (ours(good(created=-5)), "bad_field", {"conversation": 1, "field": "created"}),
    (ours(good(created=10**400)), "bad_field", {"conversation": 1, "field": "created"}),
    (ours(good(created=1e20)), "bad_field", {"conversation": 1, "field": "created"}),
    (
        ours(good()).replace(b'"created": 1700000000.0', b'"created": 1e400'),
        "bad_field",
        {"conversation": 1, "field": "created"},
    ),  # inf
    (
        ours(good()).replace(b'"created": 1700000001.0', b'"created": NaN'),
        "bad_field",
        {"conversation": 1, "field": "messages[0].created"},
    ),
    (
        ours(good()).replace(b'"created": 1700000002.0', b'"created": -Infinity'),
        "bad_field",
        {"conversation": 1, "field": "messages[1].created"},
    ),
    (
        ours(good(), good(messages=[{"role": "user"}]), good()),
        "bad_field",  # the middle one of three
        {"conversation": 2, "field": "messages[0].content"},
    ),
    (
        ours(good(settings={"system_prompt": json.loads("[" * 500 + "]" * 500)})),
        "bad_field",
        {"conversation": 1, "field": "settings.system_prompt"},
    ),
    (
        ours(with_message(0, content="x" * (TEXT_CHARS + 1))),
        "too_long",
        {"conversation": 1, "field": "messages[0].content", "limit": TEXT_CHARS},
    ),
    (
        json.dumps([{"mapping": {"a": ["not", "a", "node"]}}]).encode(),
        "bad_field",
        {"conversation": 1, "field": "mapping"},
    ),
    (json.dumps([{"mapping": []}]).encode(), "bad_field", {"conversation": 1, "field": "mapping"}),
    (
        json.dumps([{"mapping": {"a": {"message": ["hi"], "children": []}}}]).encode(),
        "bad_field",
        {"conversation": 1, "field": "mapping[…].message"},
    ),
    (
        json.dumps(
            [
                {
                    "mapping": {
                        "a": {
                            "message": {
                                "author": {"role": "user"},
                                "create_time": 1e300,
                                "content": {"content_type": "text", "parts": ["hi"]},
                            }
                        }
                    }
                }
            ]
        ).encode(),
        "bad_field",
        {"conversation": 1, "field": "mapping[…].message.create_time"},
    ),
]


@pytest.mark.parametrize("data, code, values", BAD, ids=range(len(BAD)))
async def test_a_malformed_file_is_refused_whole_and_changes_nothing(open_store, tmp_path, data, code, values):
    path = tmp_path / "h.sqlite3"
    store = await open_store(path)
    await chat(store, OWNER, "an earlier conversation")
    problem = await refused(store, path, data)
    assert (problem.code, problem.values) == (code, values)
    for lang in ("en", "zh"):
        text = describe(problem, lang)
        assert not any(word in text for word in ("{", "Error", "object", "attribute", "constraint", "recursion"))


def test_refusals_read_in_the_readers_language():
    problem = ImportProblem("bad_field", conversation=3, field="messages[2].created")
    assert describe(problem, "en") == (
        "Could not import: conversation 3 in the file: `messages[2].created` is "
        "missing or has the wrong type or value. Nothing was imported."
    )
    assert (
        describe(problem, "zh")
        == "导入失败：文件中第 3 个对话的 `messages[2].created` 缺失，或类型、取值不对。未导入任何对话。"
    )
    assert describe(ImportProblem("not_json"), "en") == (
        "Could not import: the file is not JSON (UTF-8). Nothing was imported."
    )
    assert describe(ImportProblem("would_drop", n=7, limit=10), "zh") == (
        "导入失败：此次导入会挤掉你之前的 7 个对话（最多保留 10 个）；请先删除一些，或少导入一些。未导入任何对话。"
    )


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_refusal_has_words_in_both_languages(lang):
    values = {"conversation": 2, "field": "title", "n": 3, "limit": 1, "held": "70.6 KiB"}
    for code in (
        "not_json",
        "too_deep",
        "unknown_format",
        "bad_file_field",
        "bad_field",
        "too_long",
        "unreadable",
        "too_many_conversations",
        "too_many_messages",
        "would_drop",
        "too_large",
        "not_uploaded",
        "not_written",
    ):
        text = describe(ImportProblem(code, **values), lang)
        assert text.startswith(("Could not import: ", "导入失败：")) and "{" not in text


def test_a_shape_no_check_foresaw_still_names_the_conversation_not_python():
    def breaks(c: Any, limits: Limits) -> Any:
        return c["mapping"].get("x")  # 'list' object has no attribute 'get'

    for n, error_case in enumerate(({"mapping": []}, {}), 1):
        with pytest.raises(ImportProblem) as caught:
            _one(breaks, error_case, n, Limits())
        assert (caught.value.code, caught.value.values) == ("unreadable", {"conversation": n})
    assert describe(caught.value, "en") == (
        "Could not import: conversation 2 in the file could not be read. Nothing was imported."
    )


async def test_an_import_that_would_push_out_earlier_conversations_is_refused(open_store, tmp_path):
    path = tmp_path / "h.sqlite3"
    store = await open_store(path, max_conversations=5)
    for i in range(3):
        await chat(store, OWNER, f"earlier {i}")
    for i in range(4):
        await chat(store, "key:bob", f"bob's {i}")  # another owner's count for nothing
    problem = await refused(store, path, ours(*[good(f"new {i}") for i in range(4)]))
    assert (problem.code, problem.values) == ("would_drop", {"n": 2, "limit": 5})
    assert describe(problem, "en") == (
        "Could not import: this import would push out 2 of your earlier conversations "
        "(at most 5 are kept); delete some first or import fewer. Nothing was imported."
    )
    problem = await refused(store, path, ours(*[good(f"new {i}") for i in range(6)]))
    assert (problem.code, problem.values) == ("too_many_conversations", {"n": 6, "limit": 5})
    assert await import_file(store, OWNER, ours(good("one"), good("two"))) == 2  # what fits comes in
    assert [s.title for s in await store.list(OWNER)] == ["one", "two", "earlier 2", "earlier 1", "earlier 0"]


async def test_a_conversation_longer_than_the_store_keeps_is_refused(open_store, tmp_path):
    path = tmp_path / "h.sqlite3"
    store = await open_store(path, max_messages=4)
    long = good(messages=[{"role": "user", "content": f"turn {i}"} for i in range(5)])
    problem = await refused(store, path, ours(good(), long))
    assert (problem.code, problem.values) == ("too_many_messages", {"conversation": 2, "n": 5, "limit": 4})


async def test_our_file_comes_in_whole_and_exports_back(open_store, tmp_path):
    store = await open_store(tmp_path / "h.sqlite3")
    await chat(store, OWNER, "an earlier conversation")
    extra = {**good("Tries"), "updated": 5.0, "unknown": {"kept": False}}
    extra["messages"][1]["details"] = {**DETAILS, "similarity": 0.9, "mystery": [1]}
    extra["settings"] = {"system_prompt": "", "priority": "low", "max_tokens": 64, "top_p": 0.5, "theme": "dark"}
    assert await import_file(store, OWNER, ours(good(), extra)) == 2
    everything = await export_all(store)
    assert [c.title for c in everything] == ["Heaps", "Tries", "an earlier conversation"]
    heaps, tries = everything[0], everything[1]
    assert heaps.created == 1_700_000_000.0 and heaps.settings == {"system_prompt": "be brief", "temperature": 1.0}
    assert [(m.role, m.content, m.reasoning, m.details, m.outcome, m.created) for m in heaps.messages] == [
        ("user", "What is a heap?", "", {}, "", 1_700_000_001.0),
        ("assistant", "A tree in an array.", "short", DETAILS, "done", 1_700_000_002.0),
    ]
    assert tries.messages[1].details == {**DETAILS, "similarity": 0.9}  # unknown keys dropped
    assert tries.settings == {"system_prompt": "", "priority": "low", "max_tokens": 64, "top_p": 0.5}
    again = parse_import(to_json(everything).encode())
    assert [(c.title, c.settings, [(m.role, m.content, m.details, m.created) for m in c.messages]) for c in again] == [
        (c.title, c.settings, [(m.role, m.content, m.details, m.created) for m in c.messages]) for c in everything
    ]
    assert "# Heaps" in to_markdown(everything) and "2023-11-14" in to_markdown(everything)


async def test_chatgpts_file_comes_in_and_export_all_works_after(open_store, tmp_path):
    store = await open_store(tmp_path / "h.sqlite3")
    export = [
        {
            "title": None,
            "create_time": None,
            "mapping": {
                "root": {"message": None, "parent": None, "children": ["a"]},
                "a": {
                    "message": {
                        "author": {"role": "user"},
                        "create_time": 1_690_000_001.0,
                        "content": {"content_type": "text", "parts": ["How ripe?", {"image": 1}]},
                    },
                    "parent": "root",
                    "children": ["b"],
                },
                "b": {
                    "message": {
                        "author": {"role": "assistant"},
                        "create_time": None,
                        "content": {"content_type": "text", "parts": ["Soft."]},
                    },
                    "parent": "a",
                    "children": [],
                },
            },
        },
        {"title": "empty", "mapping": {}},
    ]  # no text messages: not imported
    assert await import_file(store, OWNER, json.dumps(export).encode()) == 1
    (one,) = await export_all(store)
    assert one.title == "How ripe?" and [(m.role, m.content, m.outcome) for m in one.messages] == [
        ("user", "How ripe?", ""),
        ("assistant", "Soft.", "done"),
    ]
    assert one.messages[0].created == 1_690_000_001.0 and one.messages[1].created == one.created
    (back,) = parse_import(to_json([one]).encode(), Limits())
    assert [(m.role, m.content) for m in back.messages] == [("user", "How ripe?"), ("assistant", "Soft.")]
    assert to_markdown([one]).startswith("# How ripe?")


async def test_export_all_survives_a_time_stored_before_imports_were_checked(open_store, tmp_path):
    path = tmp_path / "h.sqlite3"
    store = await open_store(path)
    cid = await store.create(OWNER, "from an old import", {}, created=float("inf"))
    assert (await store.get(OWNER, cid)).created == float("inf")
    assert "1970-01-01" in to_markdown(await export_all(store))
    assert json.loads(to_json(await export_all(store)))["conversations"][0]["title"] == "from an old import"


async def test_a_large_import_is_read_and_stored_off_the_event_loop(open_store, tmp_path, monkeypatch):
    """A 50 MiB file is a million messages to check and turn into rows: done on the loop, every
    request and stream of the server waited for it."""
    threads: dict[str, bool] = {}

    def watched(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            threads[name] = threading.current_thread() is threading.main_thread()
            return real(*args)

        return run

    monkeypatch.setattr(imports_module, "parse_import", watched("parse", imports_module.parse_import))
    monkeypatch.setattr(store_module, "rows", watched("rows", store_module.rows))
    store = await open_store(tmp_path / "h.sqlite3")
    assert await import_file(store, OWNER, ours(good(), good("Tries"))) == 2
    assert threads == {"parse": False, "rows": False}
