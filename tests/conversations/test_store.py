"""The conversation store on a real SQLite file: per-owner isolation, bounds, a corrupt file set
aside, what survives closing and reopening, an answer left streaming by a dead server, and an
import written whole or not at all, never pushing out what the owner had."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from conversations.records import INTERRUPTED, Imported, ImportProblem, StoredMessage, title_from
from conversations.store import HistoryStore
from settings.schema import HistoryConfig


async def opened(path: Path, clock: list[float] | None = None, **limits: int) -> HistoryStore:
    now = clock if clock is not None else [1000.0]

    def tick() -> float:
        now[0] += 1
        return now[0]

    store = HistoryStore(HistoryConfig(path=str(path), **limits), tick)
    await store.open()
    assert store.available
    return store


async def chat(store: HistoryStore, owner: str, first: str, answer: str = "an answer") -> str:
    cid = await store.create(owner, first, {"system_prompt": "be brief", "temperature": 0.2})
    assert await store.add(owner, cid, StoredMessage("user", first)) is not None
    mid = await store.add(
        owner,
        cid,
        StoredMessage(
            "assistant", answer, reasoning="because", details={"class": "medium", "tokens": 2}, outcome="done"
        ),
    )
    assert mid is not None
    return cid


async def test_a_conversation_round_trips_with_its_details(tmp_path):
    store = await opened(tmp_path / "h.sqlite3")
    cid = await chat(store, "key:alice", "What is a queue?\nsecond line")
    got = await store.get("key:alice", cid)
    assert got is not None and got.title == "What is a queue? second line"
    assert got.settings == {"system_prompt": "be brief", "temperature": 0.2}
    assert [(m.role, m.content, m.reasoning, m.outcome) for m in got.messages] == [
        ("user", "What is a queue?\nsecond line", "", ""),
        ("assistant", "an answer", "because", "done"),
    ]
    assert got.messages[1].details == {"class": "medium", "tokens": 2}
    assert got.messages[0].created < got.messages[1].created
    await store.close()


async def test_another_owner_can_neither_read_nor_change_it(tmp_path):
    store = await opened(tmp_path / "h.sqlite3")
    cid = await chat(store, "key:alice", "alice's secret plan")
    bob = "key:bob"
    assert await store.get(bob, cid) is None
    assert await store.list(bob) == [] and await store.list(bob, "secret") == []
    assert not await store.rename(bob, cid, "mine now")
    assert await store.add(bob, cid, StoredMessage("user", "injected")) is None
    assert not await store.update(bob, cid, 1, StoredMessage("user", "overwritten"))
    assert not await store.truncate(bob, cid, 0)
    assert not await store.save_settings(bob, cid, {})
    assert not await store.delete(bob, cid)
    got = await store.get("key:alice", cid)
    assert got is not None and got.title == "alice's secret plan"
    assert [m.content for m in got.messages] == ["alice's secret plan", "an answer"]
    await store.close()


async def test_list_is_newest_first_and_search_reads_titles_and_text(tmp_path):
    store = await opened(tmp_path / "h.sqlite3")
    first = await chat(store, "o", "about heaps", answer="a binary tree in an array")
    second = await chat(store, "o", "about stacks", answer="last in, first out")
    assert [s.id for s in await store.list("o")] == [second, first]
    await store.add("o", first, StoredMessage("user", "and tries?"))  # a new message moves it up
    assert [s.id for s in await store.list("o")] == [first, second]
    assert [s.id for s in await store.list("o", "STACKS")] == [second]  # title, any case
    assert [s.id for s in await store.list("o", "binary tree")] == [first]  # message text
    assert await store.list("o", "100%") == [] and await store.list("o", "_") == []  # wildcards are literal
    assert await store.rename("o", second, "  LIFO   notes ")
    assert [s.title for s in await store.list("o", "lifo")] == ["LIFO notes"]
    await store.close()


async def test_bounds_drop_the_oldest_first(tmp_path):
    store = await opened(tmp_path / "h.sqlite3", max_conversations=3, max_messages=4)
    ids = [await chat(store, "o", f"chat {i}") for i in range(5)]
    other = await chat(store, "p", "another owner's")
    assert [s.title for s in await store.list("o")] == ["chat 4", "chat 3", "chat 2"]
    assert await store.get("o", ids[0]) is None and await store.get("p", other) is not None  # bounds are per owner
    for i in range(5):
        await store.add("o", ids[4], StoredMessage("user", f"more {i}"))
    got = await store.get("o", ids[4])
    assert [m.content for m in got.messages] == ["more 1", "more 2", "more 3", "more 4"]
    await store.close()


async def test_truncate_keeps_the_first_messages(tmp_path):
    store = await opened(tmp_path / "h.sqlite3")
    cid = await chat(store, "o", "one")
    await store.add("o", cid, StoredMessage("user", "two"))
    await store.add("o", cid, StoredMessage("assistant", "answer two", outcome="done"))
    assert await store.truncate("o", cid, 2)
    assert [m.content for m in (await store.get("o", cid)).messages] == ["one", "an answer"]
    await store.close()


async def test_everything_is_there_after_reopening_and_a_streaming_answer_is_marked(tmp_path):
    path = tmp_path / "h.sqlite3"
    store = await opened(path)
    cid = await chat(store, "o", "kept")
    mid = await store.add("o", cid, StoredMessage("assistant", "half an ans", outcome="streaming"))
    # no close(): as after a kill -9, only what was committed is in the file
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert raw.execute("SELECT count(*) FROM messages").fetchone()[0] == 3
    raw.close()
    again = await opened(path, [5000.0])
    got = await again.get("o", cid)
    assert [m.content for m in got.messages] == ["kept", "an answer", "half an ans"]
    assert got.messages[-1].id == mid and got.messages[-1].outcome == INTERRUPTED
    assert "stopped" in got.messages[-1].reason
    await again.close()
    await store.close()


async def test_a_corrupt_file_is_moved_aside_with_a_warning(tmp_path, caplog):
    path = tmp_path / "h.sqlite3"
    path.write_bytes(b"not a database" * 100)
    with caplog.at_level(logging.WARNING, logger="gpt_oss_webui.history"):
        store = await opened(path)
    assert len(list(tmp_path.glob("h.sqlite3.corrupt-*"))) == 1
    assert any("unreadable" in r.getMessage() for r in caplog.records)
    cid = await chat(store, "o", "after the corrupt file")
    assert (await store.get("o", cid)).title == "after the corrupt file"
    await store.close()


async def test_disabled_or_unopenable_history_stores_nothing_and_fails_nothing(tmp_path, caplog):
    off = HistoryStore(HistoryConfig(enabled=False, path=str(tmp_path / "off.sqlite3")))
    await off.open()
    assert not off.available and await off.list("o") == [] and await off.get("o", "x") is None
    assert await off.add("o", "x", StoredMessage("user", "hi")) is None and not await off.delete("o", "x")
    assert not (tmp_path / "off.sqlite3").exists()
    blocked = tmp_path / "file"
    blocked.write_text("a file where a folder should be")
    with caplog.at_level(logging.ERROR, logger="gpt_oss_webui.history"):
        broken = HistoryStore(HistoryConfig(path=str(blocked / "h.sqlite3")))
        await broken.open()
    assert not broken.available and any("history is off" in r.getMessage() for r in caplog.records)


def rows(path: Path) -> tuple[int, int]:
    raw = sqlite3.connect(path)
    try:
        return (
            raw.execute("SELECT count(*) FROM conversations").fetchone()[0],
            raw.execute("SELECT count(*) FROM messages").fetchone()[0],
        )
    finally:
        raw.close()


async def test_an_import_is_written_whole_or_not_at_all(tmp_path):
    path = tmp_path / "h.sqlite3"
    store = await opened(path)
    cid = await chat(store, "o", "kept")
    half = [
        Imported("one", {}, [StoredMessage("user", "fine")]),
        Imported("two", {}, [StoredMessage("user", None)]),  # type: ignore[arg-type]  # NOT NULL, mid-write
        Imported("three", {}, [StoredMessage("user", "fine too")]),
    ]
    with pytest.raises(sqlite3.IntegrityError):
        await store.import_conversations("o", half)
    with pytest.raises(TypeError):  # settings JSON cannot hold
        await store.import_conversations("o", [Imported("four", {}, []), Imported("five", {"x": {1, 2}}, [])])
    assert rows(path) == (1, 2) and [s.title for s in await store.list("o")] == ["kept"]
    await store.add("o", cid, StoredMessage("user", "a later write"))  # commits nothing of either
    assert rows(path) == (1, 3) and [s.title for s in await store.list("o")] == ["kept"]
    ids = await store.import_conversations(
        "o",
        [
            Imported("a", {"temperature": 0.5}, [StoredMessage("assistant", "half", outcome="streaming")], created=7.0),
            Imported("b", {}, []),
        ],
    )
    assert [s.id for s in await store.list("o")] == [*ids, cid]  # the file's order, on top
    got = await store.get("o", ids[0])
    assert got.created == 7.0 and got.settings == {"temperature": 0.5}
    assert [(m.content, m.outcome, m.created) for m in got.messages] == [("half", INTERRUPTED, 7.0)]
    await store.close()


async def test_an_import_never_pushes_out_earlier_conversations(tmp_path):
    path = tmp_path / "h.sqlite3"
    store = await opened(path, max_conversations=3, max_messages=2)
    await chat(store, "o", "first")
    await chat(store, "o", "second")
    for items, code, values in (
        ([Imported("x", {}, [])] * 2, "would_drop", {"n": 1, "limit": 3}),
        ([Imported("x", {}, [])] * 4, "too_many_conversations", {"n": 4, "limit": 3}),
        (
            [Imported("x", {}, [StoredMessage("user", "m")] * 3)],
            "too_many_messages",
            {"conversation": 1, "n": 3, "limit": 2},
        ),
    ):
        with pytest.raises(ImportProblem) as refused:
            await store.import_conversations("o", items)
        assert (refused.value.code, refused.value.values) == (code, values)
    assert rows(path) == (2, 4) and [s.title for s in await store.list("o")] == ["second", "first"]
    assert len(await store.import_conversations("o", [Imported("third", {}, [])])) == 1
    await store.close()


def test_titles_come_from_the_first_line_shortened():
    assert title_from("  hello\n  world ") == "hello world"
    long = title_from("x" * 500)
    assert len(long) == 80 and long.endswith("…")
    assert title_from("   ") == "…"
