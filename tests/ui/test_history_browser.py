"""Conversation history in a real browser (Debian's Chromium through Playwright, as
test_browser.py): it follows the signed-in caller across reloads and restarts and shows nothing of
one caller to another; the sidebar renames, searches, deletes, exports and imports; a past message
is edited and answered again; the last answer is regenerated. Screenshots in test-artifacts/ui/."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect  # noqa: E402 - after test_browser's skip

from tests.conftest import LiveServer
from tests.ui.conftest import QUICK, UI, start_server
from tests.ui.test_browser import (  # noqa: F401
    CHROMIUM,
    WAIT_MS,
    bot_text,
    browser,
    open_advanced,
    open_page,
    send,
    set_max_tokens,
    shot,
    wait_until,
    wait_until_quiet,
)

TEAM = "server.keys=[{name: alice, key: sk-alice-0001}, {name: bob, key: sk-bob-000001}]"
ALICE_TEXT = "Alice asks about plum jam"


@pytest.fixture
def sign_in(browser: Browser) -> Iterator[Callable[[LiveServer, str], Page]]:
    """sign_in(server, key) -> a page signed in with that key, in a browser context of its own."""
    contexts = []

    def opener(live: LiveServer, key: str) -> Page:
        context = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 1000}, accept_downloads=True)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(live.url + "/")
        page.locator("#key").fill(key)
        page.locator("#sign-in").click()
        settle(page)
        return page

    yield opener
    for context in contexts:
        context.close()


def settle(page: Page) -> None:
    expect(page.locator("#header")).to_contain_text("signed in as", timeout=WAIT_MS)
    wait_until_quiet(page, "#history")


def answered(page: Page) -> None:
    expect(page.locator("#answer-info")).to_contain_text("tokens", timeout=WAIT_MS)
    wait_until_quiet(page, "#chatbot")


def titles(page: Page) -> list[str]:
    return [t.strip() for t in page.locator("#history-list label").all_inner_texts()]


def open_conversation(page: Page, title: str) -> None:
    page.locator("#history-list label").filter(has_text=title).first.click()
    expect(page.locator("#chatbot [data-testid='user']").first).to_be_visible()
    wait_until_quiet(page, "#chatbot")


def user_texts(page: Page) -> list[str]:
    return [t.strip() for t in page.locator("#chatbot [data-testid='user']").all_inner_texts()]


def test_history_follows_the_caller_across_reload_and_restart(
    sign_in: Callable,
    shot: Callable,
    tmp_path: Path,
) -> None:
    path = f"ui.history.path={tmp_path}/conversations.sqlite3"
    with contextlib.ExitStack() as first:
        live = start_server(first, UI, QUICK, TEAM, path)
        alice = sign_in(live, "sk-alice-0001")
        open_advanced(alice)
        alice.locator("#system-prompt textarea").fill("Answer as a pirate")
        send(alice, ALICE_TEXT)
        answered(alice)
        answer = bot_text(alice)
        shot(alice, "answered")
        alice.reload()
        settle(alice)
        expect(alice.locator("#chatbot [data-testid='user']")).to_have_count(0)  # a new chat on a new page
        assert titles(alice) == [ALICE_TEXT]
        open_conversation(alice, ALICE_TEXT)
        assert user_texts(alice) == [ALICE_TEXT]
        expect(alice.locator("#chatbot")).to_contain_text(answer[:60])
        expect(alice.locator("#answer-info")).to_contain_text("alice · class medium")
        expect(alice.locator("#answer-info")).to_contain_text("512 tokens")
        open_advanced(alice)
        expect(alice.locator("#system-prompt textarea")).to_have_value("Answer as a pirate")
        shot(alice, "reopened")
    with contextlib.ExitStack() as second:
        live = start_server(second, UI, QUICK, TEAM, path)
        alice = sign_in(live, "sk-alice-0001")
        assert titles(alice) == [ALICE_TEXT]
        open_conversation(alice, ALICE_TEXT)
        expect(alice.locator("#chatbot")).to_contain_text(answer[:60])
        shot(alice, "after-restart")
        send(alice, "And what about apricots?")  # continues the same conversation
        answered(alice)
        assert titles(alice) == [ALICE_TEXT]
        bob = sign_in(live, "sk-bob-000001")
        assert titles(bob) == []
        send(bob, "Bob's own question")
        answered(bob)
        assert titles(bob) == ["Bob's own question"]
        bob.locator("#history-search textarea").fill("plum")
        expect(bob.locator("#history-list label")).to_have_count(0)
        html = bob.content()
        assert "plum" not in html.lower() and "apricots" not in html
        shot(bob, "bob")


def test_rename_search_delete_export_and_import(
    make_ui_server: Callable,
    open_page: Callable,
    shot: Callable,
    tmp_path: Path,
) -> None:
    page = open_page(make_ui_server(QUICK))
    open_advanced(page)
    set_max_tokens(page, 40)  # short answers: the screenshots show the sidebar, not placeholder text
    page.locator("#advanced").get_by_text("Advanced settings").click()
    expect(page.locator("#max-concurrency input")).to_be_hidden()
    send(page, "first: about heaps")
    answered(page)
    page.locator("#new-chat").click()
    expect(page.locator("#chatbot [data-testid='user']")).to_have_count(0)
    send(page, "second: about stacks")
    answered(page)
    expect(page.locator("#history-list label")).to_have_count(2)
    assert titles(page) == ["second: about stacks", "first: about heaps"]  # newest first

    page.locator("#history-search textarea").fill("heaps")
    expect(page.locator("#history-list label")).to_have_count(1)
    assert titles(page) == ["first: about heaps"]
    page.locator("#history-search textarea").fill("")
    expect(page.locator("#history-list label")).to_have_count(2)

    expect(page.locator("#history-title textarea")).to_have_value("second: about stacks")  # the one in the chat
    open_conversation(page, "first: about heaps")
    expect(page.locator("#history-title textarea")).to_have_value("first: about heaps")
    assert user_texts(page) == ["first: about heaps"]
    open_conversation(page, "second: about stacks")
    expect(page.locator("#history-title textarea")).to_have_value("second: about stacks")
    assert user_texts(page) == ["second: about stacks"]
    page.locator("#history-title textarea").fill("LIFO notes")
    page.locator("#history-title textarea").press("Enter")
    expect(page.locator("#history-list")).to_contain_text("LIFO notes")
    assert titles(page) == ["LIFO notes", "first: about heaps"]
    shot(page, "renamed")

    exported = {}
    for fmt, scope in (("JSON", "one"), ("Markdown", "all")):
        page.locator("#export-format").get_by_text(fmt, exact=True).click()
        page.locator(f"#export-{scope}").click()
        link = page.locator("#export-file a[download]").first
        expect(link).to_be_visible()
        expect(page.locator("#history-status")).to_contain_text("exported")
        with page.expect_download(timeout=WAIT_MS) as download:
            link.click()
        exported[fmt] = tmp_path / download.value.suggested_filename
        download.value.save_as(exported[fmt])
    body = json.loads(exported["JSON"].read_text(encoding="utf-8"))
    (one,) = body["conversations"]
    assert one["title"] == "LIFO notes" and [m["role"] for m in one["messages"]] == ["user", "assistant"]
    assert one["messages"][0]["content"] == "second: about stacks" and one["messages"][1]["content"]
    markdown = exported["Markdown"].read_text(encoding="utf-8")
    assert "# LIFO notes" in markdown and "# first: about heaps" in markdown and "second: about stacks" in markdown

    page.locator("#delete").click()
    expect(page.locator("#delete-confirm")).to_be_visible()
    shot(page, "confirm-delete")
    page.locator("#delete-yes").click()
    expect(page.locator("#history-list label")).to_have_count(1)
    assert titles(page) == ["first: about heaps"]
    expect(page.locator("#chatbot [data-testid='user']")).to_have_count(0)

    with page.expect_file_chooser() as chooser:
        page.locator("#import").click()
    chooser.value.set_files(str(exported["JSON"]))
    expect(page.locator("#history-status")).to_contain_text("1 conversation(s) imported")
    expect(page.locator("#history-list label")).to_have_count(2)
    open_conversation(page, "LIFO notes")
    assert user_texts(page) == ["second: about stacks"]
    expect(page.locator("#chatbot")).to_contain_text(one["messages"][1]["content"][:40])
    shot(page, "imported")

    page.locator("#new-chat").click()
    expect(page.locator("#chatbot [data-testid='user']")).to_have_count(0)
    send(page, "third: about queues, FIFO or by priority")
    answered(page)
    expect(page.locator("#history-list label")).to_have_count(3)
    assert titles(page)[0] == "third: about queues, FIFO or by priority"  # newest first
    assert sorted(titles(page)[1:]) == ["LIFO notes", "first: about heaps"]
    shot(page, "listed")  # docs/screenshots/history.png


def test_edit_a_past_message_and_regenerate_the_last_answer(
    make_ui_server: Callable,
    open_page: Callable,
    shot: Callable,
) -> None:
    page = open_page(make_ui_server(QUICK))
    send(page, "first question")
    answered(page)
    send(page, "second question")
    answered(page)
    before = bot_text(page)

    page.locator("#retry").click()  # regenerate the last answer: a new one in its place
    expect(page.locator("#answer-info")).to_contain_text("tokens", timeout=WAIT_MS)
    wait_until(lambda: bot_text(page) and bot_text(page) != before, what="a regenerated answer")
    answered(page)
    regenerated = bot_text(page)
    assert user_texts(page) == ["first question", "second question"]
    assert page.locator("#chatbot [data-testid='bot']").count() == 2
    shot(page, "regenerated")

    first_user = page.locator("#chatbot [data-testid='user']").first
    first_user.hover()
    page.locator("#chatbot").get_by_role("button", name="Edit").first.click()
    box = page.locator("#chatbot textarea.edit-textarea")
    expect(box).to_be_visible()
    box.fill("an edited first question")
    page.locator("#chatbot").get_by_role("button", name="Submit").first.click()
    wait_until(lambda: user_texts(page) == ["an edited first question"], what="the later turns to go")
    answered(page)
    shot(page, "edited")

    page.reload()
    settle(page)
    (title,) = titles(page)
    open_conversation(page, title)
    assert user_texts(page) == ["an edited first question"]
    # one answer, with its folded Details row (a bubble of its own) under it
    assert page.locator("#chatbot [data-testid='bot']").count() == 2
    expect(page.locator("#chatbot").get_by_text("Details", exact=True)).to_have_count(1)
    assert "second question" not in page.locator("#chatbot").inner_text()
    assert regenerated[:40] not in page.locator("#chatbot").inner_text()
    shot(page, "edited-reopened")


def test_an_imported_chat_renders_latex_has_copy_buttons_and_chinese_labels(
    make_ui_server: Callable,
    open_page: Callable,
    shot: Callable,
    tmp_path: Path,
) -> None:
    export = tmp_path / "chatgpt.json"
    export.write_text(
        json.dumps(
            [
                {
                    "title": "Energy",
                    "current_node": "b",
                    "mapping": {
                        "a": {
                            "message": {
                                "author": {"role": "user"},
                                "content": {"content_type": "text", "parts": ["Mass and energy?"]},
                            },
                            "parent": None,
                            "children": ["b"],
                        },
                        "b": {
                            "message": {
                                "author": {"role": "assistant"},
                                "content": {
                                    "content_type": "text",
                                    "parts": [
                                        "Inline $a^2+b^2=c^2$, and on its own line:\n\n$$E = mc^2$$\n\n```python\nprint('hi')\n```"
                                    ],
                                },
                            },
                            "parent": "a",
                            "children": [],
                        },
                    },
                }
            ]
        ),
        encoding="utf-8",
    )
    page = open_page(make_ui_server(QUICK))
    with page.expect_file_chooser() as chooser:
        page.locator("#import").click()
    chooser.value.set_files(str(export))  # ChatGPT's conversations.json
    expect(page.locator("#history-status")).to_contain_text("1 conversation(s) imported")
    open_conversation(page, "Energy")
    expect(page.locator("#chatbot .katex")).to_have_count(2)  # $...$ inline and $$...$$ on its own line
    expect(page.locator("#chatbot .katex-display")).to_have_count(1)
    expect(page.locator("#chatbot pre code")).to_contain_text("print('hi')")
    assert page.locator("#chatbot").get_by_role("button", name="Copy").count() >= 1
    shot(page, "latex")
    page.locator("#language").get_by_text("中文").click()
    expect(page.locator("#new-chat")).to_have_text("新对话")
    expect(page.locator("#export-all")).to_have_text("全部导出")
    expect(page.locator("#import")).to_contain_text("导入 JSON")
    expect(page.locator("#history")).to_contain_text("对话记录")
    shot(page, "chinese")


def test_undo_takes_the_last_turn_back_into_the_box(
    make_ui_server: Callable,
    open_page: Callable,
    shot: Callable,
) -> None:
    page = open_page(make_ui_server(QUICK))
    send(page, "keep this one")
    answered(page)
    send(page, "take this back")
    answered(page)
    page.locator("#chatbot").get_by_role("button", name="Undo").last.click()
    wait_until(lambda: user_texts(page) == ["keep this one"], what="the last turn to go")
    expect(page.locator("#message textarea")).to_have_value("take this back")
    page.reload()
    settle(page)
    open_conversation(page, "keep this one")
    assert user_texts(page) == ["keep this one"]  # the history dropped it too
    shot(page, "undone")
