"""Files at rest are their owner's alone, whatever the umask: the stores' SQLite files and their
-wal / -shm, the seal key, the log file and its backups (0600, folders made 0700); files an older
version left open are tightened; key files others may read are named at start; keys may come from
an environment variable instead of the command line."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from cache.keys import CacheKey
from cache.store import CachedResponse, ResponseCache
from conversations.records import StoredMessage
from conversations.store import HistoryStore
from monitor.logs import configure_logging
from pipeline.caller import Keyring
from responses.sealed import ReasoningSeal
from responses.store import ResponseStore, StoredResponse
from settings import ConfigError, load_config
from settings.loader import KEYS_ENV, warn_of_open_key_files
from settings.schema import CacheConfig, HistoryConfig, LoggingConfig

SHA = "ab" * 32


@pytest.fixture(autouse=True)
def permissive_umask():
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture
def warnings_seen(monkeypatch, caplog):
    """configure_logging stops propagation at gpt_oss_webui; caplog listens at the root."""
    monkeypatch.setattr(logging.getLogger("gpt_oss_webui"), "propagate", True)
    caplog.set_level(logging.WARNING)
    return caplog


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def modes_under(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): mode(p) for p in sorted(root.rglob("*"))}


def assert_private(root: Path) -> None:
    modes = modes_under(root)
    assert modes and all(m == (0o700 if (root / name).is_dir() else 0o600) for name, m in modes.items()), {
        name: oct(m) for name, m in modes.items()
    }


def stored(rid: str) -> StoredResponse:
    return StoredResponse(rid, "alice", 1.0, None, {"id": rid, "output": []}, [{"type": "message", "content": rid}])


async def test_the_response_cache_and_its_wal_are_owner_only(tmp_path):
    cache = ResponseCache(CacheConfig(path=str(tmp_path / "data" / "deep" / "cache.sqlite3")))
    await cache.open()
    cache.put(CacheKey("digest", "canonical"), CachedResponse("answer", "stop", 3, 1))
    await cache.flush()
    names = set(modes_under(tmp_path))
    assert {"data/deep/cache.sqlite3-wal", "data/deep/cache.sqlite3-shm"} <= names  # checked while they exist
    assert_private(tmp_path)
    await cache.close()
    assert_private(tmp_path)


async def test_the_response_store_history_store_and_seal_key_are_owner_only(tmp_path):
    store = ResponseStore(str(tmp_path / "data" / "responses.sqlite3"), 100.0, 100)
    await store.open()
    await store.put(stored("r1"))
    ReasoningSeal.from_file(tmp_path / "data" / "responses.key")
    history = HistoryStore(HistoryConfig(path=str(tmp_path / "conversations" / "h.sqlite3")))
    await history.open()
    cid = await history.create("o", "first", {})
    assert await history.add("o", cid, StoredMessage("user", "hello")) is not None
    assert {"data/responses.sqlite3-wal", "conversations/h.sqlite3-wal"} <= set(modes_under(tmp_path))
    assert_private(tmp_path)
    await store.close()
    await history.close()


async def test_a_corrupt_file_set_aside_leaves_two_owner_only_files(tmp_path):
    path = tmp_path / "responses.sqlite3"
    path.write_bytes(b"not a database" * 100)
    path.chmod(0o600)
    store = ResponseStore(str(path), 100.0, 100)
    await store.open()
    await store.put(stored("r1"))
    assert len(list(tmp_path.glob("responses.sqlite3.corrupt-*"))) == 1
    assert_private(tmp_path)
    await store.close()


async def test_files_an_older_version_left_open_are_tightened_with_a_warning(tmp_path, warnings_seen):
    folder = tmp_path / "data"
    folder.mkdir()
    folder.chmod(0o755)
    path = folder / "responses.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as db:  # made the old way: 0644 under this umask
        db.execute("CREATE TABLE t (x)")
    wal = Path(f"{path}-wal")
    wal.write_bytes(b"")  # left by a process that stopped without closing
    key = folder / "responses.key"
    ReasoningSeal.from_file(key)
    key.chmod(0o644)
    store = ResponseStore(str(path), 100.0, 100)
    await store.open()
    ReasoningSeal.from_file(key)
    assert mode(path) == mode(wal) == mode(key) == 0o600
    assert mode(folder) == 0o755  # a folder already there stays as it was
    lines = [r.getMessage() for r in warnings_seen.records if r.name == "gpt_oss_webui.files"]
    assert lines == [
        f"file {name} was open to group or others (mode 644); made it owner-only (600)" for name in (path, wal, key)
    ]
    await store.close()


@pytest.fixture
def restored_logging():
    root = logging.getLogger("gpt_oss_webui")
    saved = (root.handlers[:], root.level, root.propagate)
    yield
    for handler in root.handlers[:]:
        root.removeHandler(handler)
        handler.close()
    root.handlers[:], root.level, root.propagate = saved[0], saved[1], saved[2]


def test_the_log_file_and_its_rotations_are_owner_only(tmp_path, restored_logging):
    log_dir = tmp_path / "logs"
    log_dir.mkdir(mode=0o700)
    (log_dir / "app.log.2").write_text("an old backup\n")  # 0644, from an older version
    configure_logging(LoggingConfig(file=str(log_dir / "app.log"), max_bytes=1024, backup_count=3))
    log = logging.getLogger("gpt_oss_webui.test")
    for n in range(60):
        log.warning("line %d of the log, long enough to rotate the file a few times over", n)
    assert {"logs/app.log", "logs/app.log.1", "logs/app.log.2", "logs/app.log.3"} <= set(modes_under(tmp_path))
    assert_private(tmp_path)


def test_a_log_folder_made_at_start_is_0700(tmp_path, restored_logging):
    configure_logging(LoggingConfig(file=str(tmp_path / "new" / "app.log")))
    logging.getLogger("gpt_oss_webui.test").warning("hello")
    assert_private(tmp_path)


def key_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "gpt_oss_webui.settings"]


def test_a_key_file_others_may_read_is_named_at_start(tmp_path, warnings_seen):
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"- {{name: ci, key_sha256: {SHA}}}\n")
    keys.chmod(0o640)
    warn_of_open_key_files(None, load_config(None, overrides=[f"server.key_file={keys}"]))
    assert key_warnings(warnings_seen) == [
        f"{keys} holds API keys and is readable by group or others; run chmod 600 {keys}"
    ]
    warnings_seen.clear()
    keys.chmod(0o600)
    warn_of_open_key_files(None, load_config(None, overrides=[f"server.key_file={keys}"]))
    assert key_warnings(warnings_seen) == []


@pytest.mark.parametrize(
    "text, warned",
    [
        ("server:\n  keys: [{name: a, key: sk-a-12345678}]\n", True),
        ("server:\n  api_keys: [sk-1]\n", True),
        ("presets:\n  team:\n    scheduler: {priority_keys: [sk-vip]}\n", True),
        (f"server:\n  keys: [{{name: a, key_sha256: {SHA}}}]\n", False),
        ("server:\n  port: 8001\n", False),
    ],
)
def test_a_config_file_others_may_read_is_named_only_when_it_holds_keys(tmp_path, warnings_seen, text, warned):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    path.chmod(0o644)
    warn_of_open_key_files(path, load_config(path))
    assert key_warnings(warnings_seen) == (
        [f"{path} holds API keys and is readable by group or others; run chmod 600 {path}"] if warned else []
    )


@pytest.mark.parametrize(
    "value",
    [
        "[{name: env, key: sk-env-12345678, class: high}]",
        '{"keys": [{"name": "env", "key": "sk-env-12345678", "class": "high"}]}',
    ],
)
def test_keys_from_the_environment_join_the_others(tmp_path, monkeypatch, value):
    monkeypatch.setenv(KEYS_ENV, value)
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"keys: [{{name: ci, key_sha256: {SHA}}}]\n")
    config = load_config(
        None, overrides=["server.keys=[{name: inline, key: sk-inline-1234}]", f"server.key_file={keys}"]
    )
    assert [k.name for k in config.server.keys] == ["inline", "ci", "env"]
    caller = Keyring(config).identify("sk-env-12345678")
    assert (caller.name, caller.key_class.value) == ("env", "high")
    assert Keyring(load_config(None)).identify("sk-env-12345678").name == "env"  # alone, too


@pytest.mark.parametrize(
    "value, message",
    [
        ("[{name: a, key: [unclosed", "environment variable GPT_OSS_WEBUI_KEYS: not valid YAML"),
        ("sk-just-a-key", "environment variable GPT_OSS_WEBUI_KEYS: expected a list of keys"),
        ("[sk-one, sk-two]", "environment variable GPT_OSS_WEBUI_KEYS: expected a list of keys"),
        ("{keys: {name: a}}", "environment variable GPT_OSS_WEBUI_KEYS: expected a list of keys"),
    ],
)
def test_a_malformed_key_variable_is_one_line_naming_it(monkeypatch, value, message):
    monkeypatch.setenv(KEYS_ENV, value)
    with pytest.raises(ConfigError) as err:
        load_config(None)
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def test_an_empty_key_variable_changes_nothing(monkeypatch):
    monkeypatch.setenv(KEYS_ENV, "  ")
    assert load_config(None).server.keys == []
