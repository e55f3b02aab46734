"""Files the page hands out are their owner's alone, whatever the umask: a conversation export, the
batch results and the admin's usage CSV, asked for over Gradio's own HTTP endpoints on the real app,
are 0600, and so is every folder between them and the page's Gradio cache (0700), which is a fresh
folder of the server's, not Gradio's /tmp/gradio that every local user shares."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from gradio_client import Client

from app import GRADIO_CACHE
from core.private_files import private_env_folder, private_folder_in, write_private
from tests.conftest import LiveServer
from tests.ui.conftest import UI, start_server
from tests.ui.test_history_http import call, chat
from ui.account.owner import BROWSER_COOKIE

SECRET = "a conversation no other local user may read"


@pytest.fixture(autouse=True)
def permissive_umask() -> Iterator[None]:
    """The usual 022: anything left to the umask would come out 0644 / 0755."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture
def page() -> Iterator[LiveServer]:
    """An open page (no keys: everyone is its admin) started under the permissive umask."""
    with contextlib.ExitStack() as stack:
        yield start_server(stack, UI)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def assert_private_up_to_the_cache(path: Path) -> None:
    """The file is 0600 and no folder from it up to the Gradio cache root lets group or others in."""
    root = Path(os.environ[GRADIO_CACHE]).resolve()
    path = path.resolve()
    assert path.is_relative_to(root), (path, root)  # served from where it was written, not copied
    assert mode(path) == 0o600, oct(mode(path))
    for folder in path.relative_to(root).parents:
        assert mode(root / folder) & 0o077 == 0, (root / folder, oct(mode(root / folder)))


def handed_out(output: dict) -> dict:
    """The file (Gradio's FileData: its server path, its URL) in an output or an update that shows it."""
    return output["value"] if output.get("__type__") == "update" else output


def test_every_file_the_page_hands_out_is_owner_only(page: LiveServer, tmp_path: Path) -> None:
    browser = {"Cookie": f"{BROWSER_COOKIE}={httpx.get(page.url + '/', timeout=10).cookies[BROWSER_COOKIE]}"}
    Client(page.url + "/", headers=browser, verbose=False, download_files=str(tmp_path)).predict(
        *chat(SECRET), api_name="/respond"
    )
    export, _ = call(page, browser, "history_export_all", ["JSON", "English"])
    _, _, jsonl, csv = call(page, browser, "batch", ["one\ntwo", None, "low", 2, "English"])
    _, _, usage, *_ = call(page, browser, "overview", [7])
    files = [handed_out(output) for output in (export, jsonl, csv, usage)]
    for file in files:
        assert_private_up_to_the_cache(Path(file["path"]))
    assert SECRET in httpx.get(files[0]["url"], headers=browser, timeout=10).text  # and Gradio serves it
    root = Path(os.environ[GRADIO_CACHE])
    assert mode(root) == 0o700 and root != Path("/tmp/gradio")


def test_a_fresh_folder_is_made_once_and_set_for_the_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPTOSS_TEST_CACHE", "")  # unset, as far as the helper goes; gone again after the test
    made = private_env_folder("GPTOSS_TEST_CACHE", "gptoss-test-")
    assert os.environ["GPTOSS_TEST_CACHE"] == str(made) and mode(made) == 0o700
    assert private_env_folder("GPTOSS_TEST_CACHE", "gptoss-test-") == made  # a second page in the process: the same


def test_a_folder_the_operator_names_is_made_or_tightened_to_0700(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(logging.getLogger("gpt_oss_webui"), "propagate", True)
    missing, shared = tmp_path / "new" / "cache", tmp_path / "shared"
    shared.mkdir(mode=0o755)
    for folder in (missing, shared):
        monkeypatch.setenv("GPTOSS_TEST_CACHE", str(folder))
        assert private_env_folder("GPTOSS_TEST_CACHE", "gptoss-test-") == folder and mode(folder) == 0o700
    assert [r.getMessage() for r in caplog.records if r.name == "gpt_oss_webui.files"] == [
        f"folder {shared} was open to group or others (mode 755); made it owner-only (700)"
    ]


def test_an_export_is_0600_in_a_0700_folder_whatever_was_there(tmp_path: Path) -> None:
    folder = private_folder_in(tmp_path / "cache", "gptoss-x-")
    path = folder / "export.json"
    path.write_text("old")
    path.chmod(0o644)
    assert write_private(path, "new").read_text() == "new"
    assert mode(path) == 0o600 and mode(folder) == mode(tmp_path / "cache") == 0o700
