"""The real page in a real browser: headless Chromium (Debian's, never a downloaded one) driven by
Playwright's sync API against a live server around the simulator. Each step leaves a screenshot in
test-artifacts/ui/<test>-<step>.png.

Without /usr/bin/chromium or the playwright package the module is skipped, unless REQUIRE_BROWSER
is set, which makes that a failure."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pipeline.caller import key_name
from tests.conftest import LiveServer
from tests.ui.conftest import QUICK

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"
# A streamed answer of 512 tokens took 25-30 s to render beside a CPU hog here: room for a slower CI
WAIT_MS = 60_000


def _missing() -> str | None:
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} is not installed"
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed"
    return None


if (_reason := _missing()) is not None:
    if os.environ.get("REQUIRE_BROWSER"):
        pytest.fail(f"{_reason}, and REQUIRE_BROWSER is set", pytrace=False)
    pytest.skip(_reason, allow_module_level=True)

from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def open_page(browser: Browser) -> Iterator[Callable[[LiveServer], Page]]:
    """open_page(server) -> a loaded page in a fresh English context; closed after the test."""
    contexts = []

    def opener(live: LiveServer) -> Page:
        context = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 1000}, accept_downloads=True)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(live.url + "/")
        expect(page.locator("#chatbot")).to_be_visible(timeout=WAIT_MS)
        expect(page.locator("#language input[value='English']")).to_be_checked(timeout=WAIT_MS)
        # the page's load events have run (they update the header), so nothing re-renders under a test
        expect(page.locator("#header")).to_contain_text("signed in as", timeout=WAIT_MS)
        return page

    yield opener
    for context in contexts:
        context.close()


@pytest.fixture
def shot(request: pytest.FixtureRequest) -> Callable[[Page, str], Path]:
    """shot(page, step) saves test-artifacts/ui/<test>-<step>.png."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    name = request.node.name.removeprefix("test_")

    def save(page: Page, step: str) -> Path:
        path = ARTIFACTS / f"{name}-{step}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return save


def bot_text(page: Page) -> str:
    bots = page.locator("#chatbot [data-testid='bot']")
    return bots.last.inner_text() if bots.count() else ""


def settled_text(page: Page, quiet_s: float = 0.4, timeout: float = 5.0) -> str:
    """The bot's text once it has not changed for `quiet_s` (or as it is after `timeout`)."""
    last, deadline = bot_text(page), time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = bot_text(page)
        if now == last:
            break
        last = now
    return last


def send(page: Page, text: str) -> None:
    page.locator("#message textarea").fill(text)
    page.locator("#send").click()


def wait_until(condition: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


# Resolves once the element's subtree has not changed for quiet_ms (then two animation frames more),
# or with false after cap_ms.
QUIET_JS = """([selector, quietMs, capMs]) => new Promise(resolve => {
  const root = document.querySelector(selector);
  let timer;
  const observer = new MutationObserver(() => { clearTimeout(timer); timer = setTimeout(done, quietMs); });
  const cap = setTimeout(() => { observer.disconnect(); clearTimeout(timer); resolve(false); }, capMs);
  function done() {
    observer.disconnect(); clearTimeout(cap);
    requestAnimationFrame(() => requestAnimationFrame(() => resolve(true)));
  }
  observer.observe(root, {subtree: true, childList: true, attributes: true, characterData: true});
  timer = setTimeout(done, quietMs);
})"""


def wait_until_quiet(page: Page, selector: str, quiet_ms: int = 250, cap_ms: int = WAIT_MS) -> None:
    assert page.evaluate(QUIET_JS, [selector, quiet_ms, cap_ms]), f"{selector} kept changing for {cap_ms} ms"


def open_advanced(page: Page) -> None:
    """Opens the accordion and waits until Gradio has finished rendering what was inside it.

    Gradio 6 renders a closed accordion's children only on its first opening
    (render_previously_invisible_children): it mounts them, waits for a tick, for settled() and for
    an animation frame, and then pushes every prop from the page's config into each new component
    again, the initial value included. Whatever was typed before that (Playwright types within
    ~30 ms of the input appearing; the push comes ~50-70 ms after it) is overwritten: Max tokens
    went back to 512. The push changes no DOM, but it follows the last mount by a frame or so, so
    the accordion's subtree staying unchanged for a while means it is over."""
    page.locator("#advanced").get_by_text("Advanced settings").click()
    expect(page.locator("#system-prompt textarea")).to_be_visible()  # for every caller, not only an admin
    wait_until_quiet(page, "#advanced")


def set_max_tokens(page: Page, n: int) -> None:
    box = page.locator("#advanced input[aria-label='number input for Max tokens']")
    box.fill(str(n))
    box.press("Enter")
    expect(box).to_have_value(str(n))


class Blocker:
    """A long API request in a thread, to keep the only slot busy."""

    def __init__(self, live: LiveServer, max_tokens: int, priority: str = "medium") -> None:
        self.result: list[Any] = []
        body = {
            "model": "sim",
            "messages": [{"role": "user", "content": "block"}],
            "max_tokens": max_tokens,
            "priority": priority,
        }
        self.thread = threading.Thread(target=self._run, args=(live.url + "/v1/chat/completions", body), daemon=True)
        self.thread.start()

    def _run(self, url: str, body: dict) -> None:
        try:
            self.result.append(httpx.post(url, json=body, timeout=60))
        except Exception as exc:  # noqa: BLE001 - reported by join()
            self.result.append(exc)

    def join(self) -> httpx.Response:
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the API request never finished"
        response = self.result[0]
        assert isinstance(response, httpx.Response), response
        return response


def test_page_loads_with_tabs(ui_server: LiveServer, open_page: Callable, shot: Callable) -> None:
    page = open_page(ui_server)
    assert page.title() == "GPT-OSS WebUI"
    for name in ("Chat", "Monitor", "Batch"):
        expect(page.get_by_role("tab", name=name)).to_be_visible()
    for element in ("#message textarea", "#send", "#stop", "#retry", "#clear", "#advanced"):
        expect(page.locator(element)).to_be_visible()
    expect(page.locator("#queue-toast")).to_be_hidden()
    expect(page.locator("#header")).to_contain_text("sim")  # the served model
    expect(page.locator("#engine-state")).to_have_text("ready")
    shot(page, "loaded")
    page.locator("#language").get_by_text("中文").click()  # the switch relabels the page itself
    expect(page.get_by_role("tab", name="对话")).to_be_visible()
    expect(page.locator("#send")).to_have_text("发送")
    expect(page.locator("#engine-state")).to_have_text("就绪")
    shot(page, "chinese")


def test_sign_in_then_chat_as_the_key(make_ui_server: Callable, browser: Browser, shot: Callable) -> None:
    live = make_ui_server(QUICK, "server.api_keys=[k1secret]", "server.admin_keys=[admsecret]")
    context = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 1000})
    try:
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(live.url + "/")
        expect(page.locator("#sign-in")).to_be_visible()
        assert page.url.endswith("/signin")
        page.locator("#key").fill("wrong")
        page.locator("#sign-in").click()
        expect(page.locator(".problem")).to_contain_text("not known")
        page.locator("#key").fill("k1secret")
        shot(page, "sign-in")
        page.locator("#sign-in").click()
        expect(page.locator("#chatbot")).to_be_visible()
        name = key_name("k1secret")
        expect(page.locator("#header")).to_contain_text(f"signed in as {name}")
        expect(page.locator("#engine-state")).to_have_text("ready")
        send(page, "hello as a signed-in user")
        expect(page.locator("#answer-info")).to_contain_text(f"{name} · class medium", timeout=WAIT_MS)
        expect(page.locator("#usage")).to_contain_text("1 requests in 24 h", timeout=WAIT_MS)  # the header refreshes
        page.locator("#advanced").get_by_text("Advanced settings").click()
        expect(page.locator("#system-prompt textarea")).to_be_visible()
        expect(page.locator("#max-concurrency input")).to_be_hidden()  # operator controls: admins only
        shot(page, "answered")
        page.locator("#sign-out").click()
        expect(page.locator("#sign-in")).to_be_visible()
    finally:
        context.close()


def test_a_thinking_model_shows_its_reasoning_in_a_thinking_block(
    make_ui_server: Callable, open_page: Callable, shot: Callable
) -> None:
    live = make_ui_server("engine.sim.token_latency_ms=30", "engine.sim.harmony=true", "engine.sim.natural_stop=true")
    page = open_page(live)
    send(page, "Think first, then answer")
    block = page.locator("#chatbot").get_by_text("Thinking")
    expect(block).to_be_visible(timeout=WAIT_MS)
    shot(page, "thinking")
    expect(page.locator("#answer-info")).to_contain_text("tokens", timeout=WAIT_MS)
    bots = page.locator("#chatbot [data-testid='bot']")
    answer = wait_until(lambda: bots.last.inner_text().strip(), what="the answer below the thinking block")
    assert "<|" not in answer and "analysis" not in answer.split()[:1]
    assert "<|" not in page.locator("#chatbot").inner_text()
    shot(page, "answered")


def test_message_streams_an_answer(ui_server: LiveServer, open_page: Callable, shot: Callable) -> None:
    page = open_page(ui_server)
    send(page, "Tell me about priority queues")
    expect(page.locator("#chatbot [data-testid='user']")).to_contain_text("Tell me about priority queues")
    first = wait_until(lambda: bot_text(page), what="the first words of the answer")
    shot(page, "streaming")
    time.sleep(0.5)
    second = bot_text(page)
    assert len(second) > len(first) and second.startswith(first.rstrip()), (first, second)
    info = page.locator("#answer-info")
    expect(info).to_contain_text("anonymous · class medium", timeout=WAIT_MS)
    expect(info).to_contain_text("cache")
    expect(info).to_contain_text("512 tokens")
    assert len(bot_text(page)) > len(second)
    expect(page.locator("#message textarea")).to_have_value("")
    shot(page, "answered")


def test_queue_toast_while_the_server_is_saturated(
    make_ui_server: Callable, open_page: Callable, shot: Callable
) -> None:
    live = make_ui_server("scheduler.max_concurrency=1", "engine.sim.token_latency_ms=30")
    page = open_page(live)
    open_advanced(page)
    set_max_tokens(page, 40)  # the page's own answer, once it runs: about 1.2 s
    blocker = Blocker(live, max_tokens=300)  # about 9 s in the only slot
    behind: Blocker | None = None
    try:
        live.wait_for(lambda s: s["running"] == 1)
        send(page, "Am I queued?")
        toast = page.locator("#queue-toast")
        expect(toast).to_be_visible(timeout=10_000)
        expect(toast).to_contain_text("Queued: position 1 of 1")
        shot(page, "queued")
        # A low-priority request joins the queue behind the page's: the toast follows, 1 of 2.
        behind = Blocker(live, max_tokens=5, priority="low")
        expect(toast).to_contain_text("Queued: position 1 of 2", timeout=10_000)
        shot(page, "queued-updated")
        assert live.status()["running"] == 1
        expect(toast).to_be_hidden(timeout=WAIT_MS)  # generation started
        wait_until(lambda: bot_text(page), what="the queued answer's first words")
        info = page.locator("#answer-info")
        expect(info).to_contain_text("40 tokens", timeout=WAIT_MS)
        waited = float(info.inner_text().split("waited ")[1].split(" s")[0])
        assert waited >= 3, info.inner_text()
        shot(page, "answered")
    finally:
        assert blocker.join().status_code == 200
        if behind is not None:
            assert behind.join().status_code == 200


def test_stop_ends_the_generation(make_ui_server: Callable, open_page: Callable, shot: Callable) -> None:
    live = make_ui_server("engine.sim.token_latency_ms=20")  # 512 tokens: about 10 s
    page = open_page(live)
    send(page, "A long answer, please")
    wait_until(lambda: len(bot_text(page)) > 20, what="some text")
    live.wait_for(lambda s: s["running"] == 1)
    shot(page, "streaming")
    page.locator("#stop").click()
    started = time.monotonic()
    status = live.wait_for(lambda s: s["running"] == 0, timeout=8)  # the whole answer takes 10 s
    took = time.monotonic() - started
    assert status["engine"]["running"] == 0 and status["waiting_total"] == 0, status
    wait_until(lambda: live.services.engine.stats().running == 0, timeout=8, what="the engine to stop")
    stopped = settled_text(page)  # updates already on their way may still land on a slow machine
    time.sleep(1.0)
    assert bot_text(page) == stopped, "the text kept growing after stop"
    assert len(stopped.split()) < 400, "the answer ran to the end"
    assert live.services.engine.stats().running == 0
    expect(page.locator("#answer-info")).not_to_contain_text("class")
    shot(page, "stopped")
    assert took < 8


def test_apply_concurrency_limit(make_ui_server: Callable, open_page: Callable, shot: Callable) -> None:
    live = make_ui_server(QUICK)
    assert live.status()["slots"] == live.services.config.scheduler.limit.initial
    page = open_page(live)
    open_advanced(page)
    box = page.locator("#max-concurrency input")
    expect(box).to_have_value("0")  # 0: the engine's slots bound the adaptive limit
    box.fill("3")
    box.press("Tab")  # the number is committed on blur, as when a person moves on to the button
    expect(box).to_have_value("3")
    page.wait_for_timeout(300)  # the page's own state catches up with the field before the click reads it
    shot(page, "filled")
    page.locator("#apply-limits").click()
    expect(page.locator("#operator-status")).to_contain_text("applied", timeout=WAIT_MS)
    expect(page.locator("#operator-status")).to_contain_text("concurrency 3")
    shot(page, "applied")
    status = live.status()
    assert status["slots"] == 3, status


def test_batch_of_five(ui_server: LiveServer, open_page: Callable, shot: Callable, tmp_path: Path) -> None:
    prompts = [
        "first: what is a queue?",
        "second: what is a slot?",
        "third: what is aging?",
        "fourth: what is a token?",
        "fifth: what is a batch?",
    ]
    page = open_page(ui_server)
    page.get_by_role("tab", name="Batch").click()
    page.locator("#batch-prompts textarea").fill("\n".join(prompts))
    shot(page, "filled")
    page.locator("#run-batch").click()
    expect(page.locator("#batch-status")).to_contain_text("5 prompts answered", timeout=WAIT_MS)
    table = page.locator("#batch-table")
    expect(table.locator("[role=grid]")).to_have_attribute("aria-rowcount", "6")  # header + 5
    for row, prompt in enumerate(prompts):
        expect(table.locator(f"[data-testid='cell-{row}-0']")).to_have_text(str(row + 1))
        expect(table.locator(f"[data-testid='cell-{row}-1']")).to_have_text(prompt)
        expect(table.locator(f"[data-testid='cell-{row}-3']")).to_have_text("ok")
    shot(page, "done")

    files = {}
    for fmt in ("jsonl", "csv"):
        button = page.locator(f"#download-{fmt}")
        expect(button).to_be_visible()
        with page.expect_download(timeout=WAIT_MS) as download:
            button.click()
        files[fmt] = tmp_path / f"results.{fmt}"
        download.value.save_as(files[fmt])
    jsonl = [json.loads(line) for line in files["jsonl"].read_text(encoding="utf-8").splitlines() if line.strip()]
    with files["csv"].open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for parsed in (jsonl, rows):
        assert [r["prompt"] for r in parsed] == prompts
        assert [int(r["index"]) for r in parsed] == [0, 1, 2, 3, 4]
        assert all(r["answer"].strip() and r["status"] == "ok" for r in parsed), parsed
    assert [r["answer"] for r in rows] == [r["answer"] for r in jsonl]


def test_a_batch_job_from_the_page_shows_its_progress_and_its_answers(
    ui_server: LiveServer, open_page: Callable, shot: Callable, tmp_path: Path
) -> None:
    prompts = [f"job prompt {i}" for i in range(6)]
    page = open_page(ui_server)
    page.get_by_role("tab", name="Batch").click()
    page.locator("#batch-prompts textarea").fill("\n".join(prompts))
    page.locator("#submit-job").click()
    expect(page.locator("#job-status")).to_contain_text("6 prompts", timeout=WAIT_MS)
    batch_id = page.locator("#job-id textarea, #job-id input").first.input_value()
    assert batch_id.startswith("batch_")
    table = page.locator("#job-table")
    expect(table.locator("[data-testid='cell-0-1']")).to_have_text("completed", timeout=WAIT_MS)  # the timer polls
    expect(table.locator("[data-testid='cell-0-2']")).to_contain_text("6/6")
    shot(page, "job-done")
    page.locator("#refresh-jobs").click()
    button = page.locator("#download-output")
    expect(button).to_be_enabled(timeout=WAIT_MS)
    with page.expect_download(timeout=WAIT_MS) as download:
        button.click()
    saved = tmp_path / "answers.jsonl"
    download.value.save_as(saved)
    answers = [json.loads(line) for line in saved.read_text(encoding="utf-8").splitlines()]
    assert sorted(a["custom_id"] for a in answers) == [f"prompt-{i + 1}" for i in range(6)]
    assert all(a["response"]["status_code"] == 200 for a in answers)
    api = httpx.get(f"{ui_server.url}/v1/batches/{batch_id}").json()
    assert api["status"] == "completed" and api["request_counts"]["completed"] == 6  # the same job on the API


def test_two_tabs_are_served_at_once(ui_server: LiveServer, open_page: Callable, shot: Callable) -> None:
    assert ui_server.status()["slots"] == ui_server.services.config.scheduler.limit.initial
    first, second = open_page(ui_server), open_page(ui_server)
    first.locator("#message textarea").fill("hello from tab one")
    second.locator("#message textarea").fill("hello from tab two")
    started = time.monotonic()
    first.locator("#send").click()
    second.locator("#send").click()
    ui_server.wait_for(lambda s: s["running"] == 2, timeout=5)
    both_running = time.monotonic() - started
    shot(first, "tab-one-streaming")
    shot(second, "tab-two-streaming")
    for page in (first, second):
        info = page.locator("#answer-info")
        expect(info).to_contain_text("512 tokens", timeout=WAIT_MS)
        expect(info).to_contain_text("waited 0.0 s")  # neither queued behind the other
    # Both were in the engine together within a fraction of one answer's time (512 steps of 5 ms).
    assert both_running < 512 * 0.005, both_running
    expect(first.locator("#chatbot")).to_contain_text("hello from tab one")
    expect(first.locator("#chatbot")).not_to_contain_text("tab two")
    expect(second.locator("#chatbot")).to_contain_text("hello from tab two")
    expect(second.locator("#chatbot")).not_to_contain_text("tab one")
    shot(first, "tab-one-answered")
    shot(second, "tab-two-answered")


def test_monitor_tab(ui_server: LiveServer, open_page: Callable, shot: Callable) -> None:
    page = open_page(ui_server)
    page.get_by_role("tab", name="Monitor").click()
    monitor = page.locator("#monitor")
    expect(monitor).to_contain_text("No GPU here", timeout=3_000)
    expect(monitor.locator("table")).to_be_visible(timeout=3_000)
    expect(monitor.locator("table")).to_contain_text("waiting high / medium / low")
    initial = ui_server.services.config.scheduler.limit.initial
    expect(monitor.locator("table")).to_contain_text(f"0 / {initial}")  # running / limit
    expect(monitor.locator("table")).to_contain_text("(100 ms)")  # the TPOT objective
    shot(page, "shown")


def test_a_page_on_another_origin_cannot_sign_the_browser_in(
    make_ui_server: Callable, browser: Browser, shot: Callable
) -> None:
    """Login CSRF: a page elsewhere auto-submits the sign-in form with the attacker's key; the browser
    must come back to this server still signed out (else its chats would land in their history)."""
    live = make_ui_server(QUICK, "server.keys=[{name: mallory, key: sk-mallory-01}]")
    attack = (
        f'<form id="f" method="post" action="{live.url}/signin"><input name="key" value="sk-mallory-01">'
        '</form><script>document.getElementById("f").submit()</script>'
    )
    context = browser.new_context(locale="en-US")
    try:
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        # another origin: the server's port on "localhost" is a different site from 127.0.0.1
        other = live.url.replace("127.0.0.1", "localhost") + "/elsewhere"
        page.route(other, lambda route: route.fulfill(status=200, content_type="text/html", body=attack))
        with page.expect_response(lambda r: r.url.endswith("/signin") and r.request.method == "POST") as posted:
            page.goto(other)
        assert posted.value.status == 403
        shot(page, "refused")
        assert not any(c["name"] == "gptoss_session" for c in context.cookies())
        page.goto(live.url + "/")
        expect(page.locator("#sign-in")).to_be_visible()
        assert page.url.endswith("/signin")
    finally:
        context.close()
