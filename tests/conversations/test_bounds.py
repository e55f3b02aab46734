"""The history's bounds in bytes on a real SQLite file: each conversation's size kept exact by
every kind of write (checked against a count made here from the rows), an owner's least recently
used conversations going past `max_bytes`, anyone's least recently used going past
`max_total_bytes`, an import refused rather than pushing out its owner's own, and a file from
before the sizes counted when it is opened."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from conversations.records import Imported, ImportProblem, StoredMessage
from conversations.store import HistoryStore
from tests.conversations.test_store import opened

KIB = 1024


def counted(path: Path) -> tuple[dict[str, int], int]:
    """Every conversation's size counted from its rows, in Python, and the stored total."""
    with sqlite3.connect(path) as db:
        sizes = {
            cid: 256 + len(title.encode()) + len(settings.encode())
            for cid, title, settings in db.execute("SELECT id, title, settings FROM conversations")
        }
        for cid, *texts in db.execute("SELECT conversation_id, content, reasoning, details, reason FROM messages"):
            sizes[cid] += 64 + sum(len(t.encode()) for t in texts)
        stored = dict(db.execute("SELECT id, bytes FROM conversations").fetchall())
        total = db.execute("SELECT bytes FROM history_total").fetchone()[0]
    assert stored == sizes
    return sizes, total


def owners(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT owner, SUM(bytes) FROM conversations GROUP BY owner").fetchall())


async def conversation(store: HistoryStore, owner: str, size: int, title: str = "t") -> str:
    cid = await store.create(owner, title, {})
    assert await store.add(owner, cid, StoredMessage("user", "x" * size)) is not None
    return cid


async def test_every_kind_of_write_keeps_the_sizes_exact(tmp_path):
    path = tmp_path / "h.sqlite3"
    store = await opened(path)
    cid = await store.create("key:a", "Grüße", {"system_prompt": "短い"})
    mid = await store.add("key:a", cid, StoredMessage("user", "naïve ✓"))
    assert mid is not None
    answer = await store.add("key:a", cid, StoredMessage("assistant", "", outcome="streaming"))
    assert answer is not None
    await store.update("key:a", cid, answer, StoredMessage("assistant", "grown " * 50, "why", {"k": 1}, "done"))
    await store.rename("key:a", cid, "a new title")
    await store.save_settings("key:a", cid, {"system_prompt": "longer " * 20})
    other = await conversation(store, "key:b", 3000)
    await store.truncate("key:a", cid, 1)
    sizes, total = counted(path)
    assert total == sum(sizes.values()) and sizes[other] == 256 + 1 + 2 + 64 + 3000 + 2
    await store.delete("key:b", other)
    sizes, total = counted(path)
    assert list(sizes) == [cid] and total == sizes[cid]
    await store.close()
    reopened = await opened(path)
    assert counted(path) == (sizes, total)
    await reopened.close()


async def test_past_an_owners_bytes_its_least_recently_used_go_first(tmp_path):
    path = tmp_path / "h.sqlite3"
    store = await opened(path, max_bytes=64 * KIB)
    kept_elsewhere = await conversation(store, "key:b", 50 * KIB)
    first = await conversation(store, "key:a", 20 * KIB)
    second = await conversation(store, "key:a", 20 * KIB)
    third = await conversation(store, "key:a", 20 * KIB)
    assert await store.add("key:a", first, StoredMessage("assistant", "used again")) is not None
    fourth = await conversation(store, "key:a", 20 * KIB)
    ids = {s.id for s in await store.list("key:a")}
    assert ids == {first, third, fourth} and second not in ids  # the least recently used went
    assert owners(path)["key:a"] <= 64 * KIB
    assert [s.id for s in await store.list("key:b")] == [kept_elsewhere]
    await store.close()


async def test_one_conversation_past_the_bytes_loses_its_oldest_messages_never_its_newest(tmp_path):
    path = tmp_path / "h.sqlite3"
    store = await opened(path, max_bytes=64 * KIB)
    cid = await conversation(store, "key:a", 30 * KIB)
    for n in range(3):
        assert await store.add("key:a", cid, StoredMessage("assistant", f"{n}" * 30 * KIB)) is not None
    got = await store.get("key:a", cid)
    assert got is not None and [m.content[0] for m in got.messages] == ["1", "2"]
    huge = await store.add("key:a", cid, StoredMessage("user", "h" * 100 * KIB))
    got = await store.get("key:a", cid)
    assert got is not None and [m.id for m in got.messages] == [huge]
    await store.close()


async def test_past_the_total_the_least_recently_used_go_whoevers_down_to_a_tenth_under(tmp_path):
    path = tmp_path / "h.sqlite3"
    limit = 1024 * KIB
    store = await opened(path, max_total_bytes=limit)
    old = [await conversation(store, "key:old", 100 * KIB) for _ in range(3)]
    many = [await conversation(store, f"browser:{n}", 100 * KIB) for n in range(6)]
    assert await store.add("key:old", old[0], StoredMessage("user", "used again")) is not None
    assert counted(path)[1] <= limit
    writer = await conversation(store, "key:writer", 150 * KIB)
    sizes, total = counted(path)
    assert total <= 0.9 * limit
    assert [c in sizes for c in old] == [True, False, False]  # the two least recently used
    assert all(c in sizes for c in many) and writer in sizes
    await store.close()


async def test_an_import_past_the_owners_bytes_is_refused_and_changes_nothing(tmp_path):
    path = tmp_path / "h.sqlite3"
    store = await opened(path, max_bytes=64 * KIB)
    held = await conversation(store, "key:a", 40 * KIB)
    before = counted(path)
    item = Imported("imported", {}, [StoredMessage("user", "y" * 30 * KIB)])
    with pytest.raises(ImportProblem) as refused:
        await store.import_conversations("key:a", [item])
    assert refused.value.code == "too_large" and refused.value.values == {"held": "70.6 KiB", "limit": "64.0 KiB"}
    assert counted(path) == before and [s.id for s in await store.list("key:a")] == [held]
    assert len(await store.import_conversations("key:b", [item])) == 1
    await store.close()


async def test_a_file_from_before_the_sizes_is_counted_when_opened(tmp_path):
    path = tmp_path / "h.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE conversations (id TEXT PRIMARY KEY, owner TEXT NOT NULL, title TEXT NOT NULL, "
            "created REAL NOT NULL, updated REAL NOT NULL, settings TEXT NOT NULL)"
        )
        db.execute(
            "CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id TEXT NOT NULL, "
            "role TEXT NOT NULL, content TEXT NOT NULL, reasoning TEXT NOT NULL, details TEXT NOT NULL, "
            "outcome TEXT NOT NULL, reason TEXT NOT NULL, created REAL NOT NULL)"
        )
        for n in range(3):
            db.execute("INSERT INTO conversations VALUES (?, 'key:a', 'old', ?, ?, '{}')", (f"c{n}", n, n))
            db.execute(
                "INSERT INTO messages (conversation_id, role, content, reasoning, details, outcome, reason, created) "
                "VALUES (?, 'user', ?, '', ?, '', '', ?)",
                (f"c{n}", "z" * 30 * KIB, json.dumps({}), n),
            )
    store = await opened(path, max_bytes=64 * KIB)
    sizes, total = counted(path)
    assert total == sum(sizes.values()) > 64 * KIB  # counted, not cut, until the owner writes
    await conversation(store, "key:a", 10)
    assert owners(path)["key:a"] <= 64 * KIB
    assert {s.id for s in await store.list("key:a")} >= {"c2"}
    await store.close()
