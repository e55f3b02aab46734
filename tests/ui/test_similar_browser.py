"""A similar question's answer on the page, in a real browser (as test_browser.py): the line under
it says so, "Ask the model instead" shows only then, and clicking it reports the pairing and puts
the model's own answer in its place, in the chat and in the stored conversation."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Page, expect  # noqa: E402 - after test_browser's skip

from tests.ui.conftest import QUICK, UI, start_server
from tests.ui.test_browser import WAIT_MS, bot_text, browser, open_advanced, open_page, send, shot  # noqa: F401
from tests.ui.test_similar_http import PARAPHRASE, QUESTION


def set_number(page: Page, label: str, value: float) -> None:
    box = page.locator(f"#advanced input[aria-label='number input for {label}']")
    box.fill(str(value))
    box.press("Enter")
    expect(box).to_have_value(str(value))


def test_a_similar_answer_is_marked_and_the_model_can_answer_instead(
    open_page: Callable,
    shot: Callable,
    tmp_path: Path,
) -> None:
    with contextlib.ExitStack() as stack:
        live = start_server(
            stack, UI, QUICK, "cache.enabled=true", f"cache.path={tmp_path}/cache.sqlite3", "cache.similar.enabled=true"
        )
        page = open_page(live)
        open_advanced(page)
        set_number(page, "Temperature", 0)  # only deterministic requests are answered from the cache
        set_number(page, "Max tokens", 24)
        info, ask = page.locator("#answer-info"), page.locator("#ask-model")
        send(page, QUESTION)
        expect(info).to_contain_text("cache miss", timeout=WAIT_MS)
        expect(ask).to_be_hidden()
        first = bot_text(page)

        page.locator("#new-chat").click()
        expect(page.locator("#chatbot [data-testid='user']")).to_have_count(0)
        send(page, PARAPHRASE)
        expect(info).to_contain_text("a similar question's answer (similarity 0.", timeout=WAIT_MS)
        expect(ask).to_be_visible()
        assert bot_text(page) == first
        shot(page, "similar")

        generated = live.services.engine.stats().generated_tokens
        ask.click()
        expect(info).to_contain_text("cache miss", timeout=WAIT_MS)
        expect(ask).to_be_hidden()
        assert live.services.cache.similar.false_hits == 1
        assert live.services.engine.stats().generated_tokens > generated
        expect(page.locator("#chatbot [data-testid='bot']")).to_have_count(1)  # replaced, not added
        shot(page, "asked")

        page.reload()
        page.locator("#history-list label").filter(has_text="in python,").first.click()
        expect(page.locator("#chatbot [data-testid='bot']")).to_have_count(2)  # the answer and its Details
        expect(page.locator("#chatbot")).not_to_contain_text("similar question")
