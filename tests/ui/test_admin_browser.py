"""The Admin tab in a real browser: only an admin sees it; it shows usage per user per day, the
requests running now, and makes, uses and revokes a key, each change in the audit log."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import httpx
from playwright.sync_api import Page, expect

from tests.conftest import LiveServer
from tests.ui.conftest import QUICK, UI, start_server
from tests.ui.test_browser import CHROMIUM, WAIT_MS, browser, shot  # noqa: F401
from tests.ui.test_history_browser import sign_in  # noqa: F401

TEAM = "server.keys=[{name: alice, key: sk-alice-0001}, {name: ops, key: sk-ops-00001, admin: true}]"
CHAT = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


def test_only_an_admin_sees_the_admin_tab_and_manages_keys_there(
    sign_in: Callable[[LiveServer, str], Page],
    shot: Callable,
    tmp_path,
) -> None:
    with contextlib.ExitStack() as stack:
        live = start_server(stack, UI, QUICK, TEAM, f"usage.path={tmp_path / 'u.sqlite3'}")
        httpx.post(f"{live.url}/v1/chat/completions", json=CHAT, headers={"Authorization": "Bearer sk-alice-0001"})
        alice = sign_in(live, "sk-alice-0001")
        expect(alice.get_by_role("tab", name="Batch")).to_be_visible()
        expect(alice.get_by_role("tab", name="Admin")).to_have_count(0)
        ops = sign_in(live, "sk-ops-00001")
        ops.get_by_role("tab", name="Admin").click()
        usage = ops.locator("#admin-usage")
        expect(usage.locator("[data-testid='cell-0-1']")).to_have_text("alice", timeout=WAIT_MS)
        expect(usage.locator("[data-testid='cell-0-4']")).to_have_text("5")
        name = ops.locator("#admin-key-name textarea, #admin-key-name input").first
        name.fill("student")
        expect(name).to_have_value("student")  # in the page's state before the click sends it
        ops.locator("#admin-make-key").click()
        secret = ops.locator("#admin-secret textarea, #admin-secret input").first
        ops.wait_for_function(
            "() => (document.querySelector('#admin-secret textarea') || "
            "document.querySelector('#admin-secret input')).value.startsWith('sk-')",
            timeout=WAIT_MS,
        )
        made = secret.input_value()
        shot(ops, "key-made")
        used = httpx.post(f"{live.url}/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {made}"})
        assert used.status_code == 200
        expect(ops.locator("#admin-audit [data-testid='cell-0-2']")).to_have_text("create")
        ops.locator("#admin-revoke-key").click()
        expect(ops.locator("#admin-audit [data-testid='cell-0-2']")).to_have_text("revoke", timeout=WAIT_MS)
        gone = httpx.post(f"{live.url}/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {made}"})
        assert gone.status_code == 401
