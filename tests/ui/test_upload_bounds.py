"""Uploads the page keeps, bounded on disk: past the byte budget the session holding the most
loses its oldest file, from the disk too; another session's files stay."""

from __future__ import annotations

from pathlib import Path

import pytest

from ui.account.uploads import Uploads


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))
    return tmp_path


def upload(folder: Path, name: str, size: int) -> str:
    path = folder / f"hash-{name}" / f"{name}.jsonl"
    path.parent.mkdir()
    path.write_bytes(b"x" * size)
    return str(path)


def test_past_the_budget_the_biggest_holders_oldest_files_go_first(folder: Path) -> None:
    uploads = Uploads(max_bytes=1000)
    alice = upload(folder, "alice", 300)
    uploads.add("alice", [alice])
    flood = [upload(folder, f"m{i}", 200) for i in range(10)]
    for path in flood:
        uploads.add("mallory", [path])
    assert uploads.owns("alice", alice) and Path(alice).exists()
    kept = [p for p in flood if uploads.owns("mallory", p)]
    assert kept == flood[-3:] and uploads.total_bytes == 900
    assert [Path(p).exists() for p in flood] == [False] * 7 + [True] * 3
    assert not Path(flood[0]).parent.exists()  # Gradio's folder for it too


def test_nothing_outside_the_upload_folder_is_deleted(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "keep.txt"
    elsewhere.write_bytes(b"x" * 500)
    uploads = Uploads(max_bytes=100)
    uploads.add("mallory", [str(elsewhere)])
    assert elsewhere.exists() and not uploads.owns("mallory", str(elsewhere))


def test_a_file_two_sessions_uploaded_stays_while_either_holds_it(folder: Path) -> None:
    """Gradio names an upload by its content: the same file from two sessions is one path."""
    uploads = Uploads(max_bytes=1000)
    shared = upload(folder, "prompts", 100)
    uploads.add("victim", [shared])
    uploads.add("mallory", [shared])
    for i in range(10):
        uploads.add("mallory", [upload(folder, f"m{i}", 200)])
    assert not uploads.owns("mallory", shared) and uploads.owns("victim", shared) and Path(shared).exists()
