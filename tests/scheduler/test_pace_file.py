"""The learned pace on disk: read back per engine, owner-only, bounded, and a row or a file that
does not read back set aside with a warning while the server goes on learning afresh."""

from __future__ import annotations

import logging
import sqlite3
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from engine.base import Capabilities
from scheduler.learned_pace import LearnedPace, remember
from scheduler.limit import ConcurrencyLimit
from scheduler.pace_file import PaceFile, engine_key
from scheduler.tpot_line import TpotLine
from settings.schema import LimitConfig

MONTH_S = 30 * 86_400


def a_pace(limit: float = 5.0) -> LearnedPace:
    line = TpotLine()
    for n in range(1, 9):
        line.add(n, 0.03 + 0.012 * n)
    return remember(ConcurrencyLimit(LimitConfig(initial=int(limit)), 0.1, upper=64), line)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_what_was_saved_for_an_engine_reads_back_for_it_alone(tmp_path: Path):
    pace_file = PaceFile(str(tmp_path / "pace.sqlite3"))
    await pace_file.open()
    await pace_file.save("engine-a", a_pace(5))
    await pace_file.save("engine-b", a_pace(9))
    assert await pace_file.load("engine-a") == a_pace(5)
    assert (await pace_file.load("engine-b")).limit == 9
    assert await pace_file.load("engine-c") is None
    await pace_file.close()
    assert stat.S_IMODE((tmp_path / "pace.sqlite3").stat().st_mode) == 0o600


async def test_a_row_that_does_not_read_back_is_dropped_with_a_warning(tmp_path: Path, caplog):
    path = tmp_path / "pace.sqlite3"
    pace_file = PaceFile(str(path))
    await pace_file.open()
    await pace_file.save("engine-a", a_pace())
    await pace_file.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE pace SET learned = ?", ('{"limit": -1}',))
    await pace_file.open()
    with caplog.at_level(logging.WARNING, logger="gpt_oss_webui.queue"):
        assert await pace_file.load("engine-a") is None
    assert "learning afresh" in caplog.text
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM pace").fetchone() == (0,)
    await pace_file.close()


async def test_an_unreadable_file_is_moved_aside_and_a_new_one_kept(tmp_path: Path, caplog):
    path = tmp_path / "pace.sqlite3"
    path.write_bytes(b"not a database, " * 512)
    pace_file = PaceFile(str(path))
    with caplog.at_level(logging.WARNING):
        await pace_file.open()
    assert "moved it to" in caplog.text and list(tmp_path.glob("pace.sqlite3.corrupt-*"))
    await pace_file.save("engine-a", a_pace())
    assert await pace_file.load("engine-a") == a_pace()
    await pace_file.close()


async def test_the_file_keeps_the_newest_engines_within_a_month(tmp_path: Path):
    clock = Clock()
    pace_file = PaceFile(str(tmp_path / "pace.sqlite3"), clock)
    await pace_file.open()
    for i in range(20):
        clock.now += 60
        await pace_file.save(f"engine-{i}", a_pace())
    with sqlite3.connect(tmp_path / "pace.sqlite3") as db:
        kept = {row[0] for row in db.execute("SELECT engine FROM pace")}
    assert kept == {f"engine-{i}" for i in range(4, 20)}
    clock.now += MONTH_S + 1
    assert await pace_file.load("engine-19") is None  # a month unused: the machine has likely changed
    await pace_file.close()


async def test_only_a_change_is_written_and_the_last_one_at_close(tmp_path: Path):
    clock = Clock()
    pace_file = PaceFile(str(tmp_path / "pace.sqlite3"), clock)
    await pace_file.open()
    current = a_pace(5)
    assert await pace_file.start("engine-a", lambda: current) is None
    await pace_file.keep()
    clock.now += 100
    await pace_file.keep()  # unchanged: not written again
    with sqlite3.connect(tmp_path / "pace.sqlite3") as db:
        assert db.execute("SELECT saved_at FROM pace").fetchone() == (clock.now - 100,)
    current = a_pace(7)
    await pace_file.close()
    await pace_file.open()
    assert (await pace_file.load("engine-a")).limit == 7
    await pace_file.close()


@pytest.mark.parametrize(
    "other",
    [
        {"model": "another-model"},
        {"max_num_seqs": 8},
        {"token_budget": 4096},
    ],
)
def test_another_model_or_engine_size_is_another_engine(other):
    caps = Capabilities(model="m", max_model_len=2048, token_budget=16384, supports_priority=False, max_num_seqs=16)
    assert engine_key("llamacpp", caps) == engine_key("llamacpp", replace(caps, resumable=True))
    assert engine_key("llamacpp", caps) != engine_key("vllm", caps)
    assert engine_key("llamacpp", caps) != engine_key("llamacpp", replace(caps, **other))
