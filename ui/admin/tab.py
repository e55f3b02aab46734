"""The Admin tab, for admins only (shown to them at load; every handler checks again, since each
is an API too): usage per user per day over a chosen range, as a chart and a table with CSV;
the requests running and waiting now; keys made at run time (make, rotate, revoke); the audit log."""

from __future__ import annotations

import csv
import io
import time
from dataclasses import dataclass

import gradio as gr
import pandas as pd
from gradio.utils import get_upload_folder

from core.private_files import private_folder_in, write_private
from pipeline import key_admin
from pipeline.caller import Caller
from pipeline.refusal import Refusal
from pipeline.usage_buckets import page as usage_page
from pipeline.usage_file import usage_rows
from ui.page import Labels, Page

DAY = 86_400
USAGE_COLUMNS = ["day", "user", "requests", "prompt tokens", "completion tokens"]
NOW_COLUMNS = ["user", "class", "state", "waited s", "prompt tokens", "max tokens"]
KEY_COLUMNS = ["name", "class", "source", "limits", "created"]
AUDIT_COLUMNS = ["when", "who", "action", "key", "detail"]


@dataclass(slots=True)
class _Parts:
    days: gr.Number
    refresh: gr.Button
    export: gr.DownloadButton
    chart: gr.BarPlot
    table: gr.Dataframe
    now: gr.Dataframe
    keys: gr.Dataframe
    key_name: gr.Textbox
    key_class: gr.Radio
    daily: gr.Number
    make: gr.Button
    rotate: gr.Button
    revoke: gr.Button
    secret: gr.Textbox
    audit: gr.Dataframe


def build_admin_tab(page: Page, t: gr.I18n) -> tuple[Labels, gr.Tab]:
    with gr.Tab(t("admin"), elem_id="tab-admin", visible=False) as tab:
        p = _layout(t)
    handlers = _Handlers(page)
    outputs = [p.chart, p.table, p.export, p.now, p.keys, p.audit]
    for opened in (p.refresh.click, tab.select):
        opened(handlers.overview, [p.days], outputs, concurrency_limit=None)
    for button, action in ((p.make, "make"), (p.rotate, "rotate"), (p.revoke, "revoke")):
        button.click(
            handlers.changing(action),
            [p.key_name, p.key_class, p.daily],
            [p.secret, p.keys, p.audit],
            concurrency_limit=None,
        )
    return (
        {
            tab: "admin",
            p.days: "days",
            p.refresh: "refresh",
            p.export: "download_csv",
            p.chart: "usage_chart",
            p.table: "usage_table",
            p.now: "requests_now",
            p.keys: "keys",
            p.key_name: "key_name",
            p.key_class: "priority",
            p.daily: "daily_tokens",
            p.make: "make_key",
            p.rotate: "rotate_key",
            p.revoke: "revoke_key",
            p.secret: "new_secret",
            p.audit: "audit",
        },
        tab,
    )


def _layout(t: gr.I18n) -> _Parts:
    with gr.Row():
        days = gr.Number(7, precision=0, minimum=1, maximum=90, label=t("days"), elem_id="admin-days")
        refresh = gr.Button(t("refresh"), elem_id="admin-refresh")
        export = gr.DownloadButton(t("download_csv"), elem_id="admin-csv")  # type: ignore[arg-type]
    chart = gr.BarPlot(x="day", y="tokens", color="user", label=t("usage_chart"), elem_id="admin-chart")
    table = gr.Dataframe(headers=USAGE_COLUMNS, label=t("usage_table"), elem_id="admin-usage", interactive=False)
    now = gr.Dataframe(headers=NOW_COLUMNS, label=t("requests_now"), elem_id="admin-now", interactive=False)
    keys = gr.Dataframe(headers=KEY_COLUMNS, label=t("keys"), elem_id="admin-keys", interactive=False)
    with gr.Row():
        key_name = gr.Textbox(label=t("key_name"), elem_id="admin-key-name")
        key_class = gr.Radio(["high", "medium", "low"], value="medium", label=t("priority"))
        daily = gr.Number(0, precision=0, minimum=0, label=t("daily_tokens"), elem_id="admin-daily")
    with gr.Row():
        make = gr.Button(t("make_key"), elem_id="admin-make-key")
        rotate = gr.Button(t("rotate_key"), elem_id="admin-rotate-key")
        revoke = gr.Button(t("revoke_key"), elem_id="admin-revoke-key")
    secret = gr.Textbox(label=t("new_secret"), elem_id="admin-secret", interactive=False)
    audit = gr.Dataframe(headers=AUDIT_COLUMNS, label=t("audit"), elem_id="admin-audit", interactive=False)
    return _Parts(
        days, refresh, export, chart, table, now, keys, key_name, key_class, daily, make, rotate, revoke, secret, audit
    )


class _Handlers:
    """Each an endpoint of the page: the caller is checked for admin on every call."""

    def __init__(self, page: Page) -> None:
        self.page = page

    def admin_of(self, request: gr.Request) -> Caller:
        caller = self.page.caller_of(request)
        if not caller.admin:
            raise gr.Error("the Admin tab needs an admin key")
        return caller

    async def overview(self, span: float | None, request: gr.Request) -> tuple:
        self.admin_of(request)
        page = self.page
        rows = await _usage_by_day(page, int(span or 7))
        text = io.StringIO(newline="")
        csv.writer(text).writerows([USAGE_COLUMNS, *rows])
        path = write_private(
            private_folder_in(get_upload_folder(), "gptoss-usage-") / "usage-by-day.csv", text.getvalue()
        )
        plotted = pd.DataFrame([(r[0], r[1], r[3] + r[4]) for r in rows], columns=["day", "user", "tokens"])
        return (plotted, rows, str(path), _now_rows(page), await _key_rows(page), await _audit_rows(page))

    async def change(self, action: str, name: str, cls: str, daily_tokens: float | None, request: gr.Request) -> tuple:
        actor, services = self.admin_of(request), self.page.services
        shown, name = "", name.strip() if isinstance(name, str) else ""
        try:
            store = key_admin.admin_check(actor, services.keyring, services.key_store)
            if action == "make":
                daily = daily_tokens if isinstance(daily_tokens, (int, float)) and 0 < daily_tokens < 2**53 else None
                fields = {"name": name, "class": cls, **({"daily_tokens": int(daily)} if daily else {})}
                shown = (await key_admin.create(services.keyring, store, actor.name, fields))["key"]
            elif action == "rotate":
                shown = (await key_admin.rotate(services.keyring, store, actor.name, name))["key"]
            else:
                await key_admin.revoke(services.keyring, store, actor.name, name)
        except Refusal as exc:
            gr.Warning(exc.message)
        return shown, await _key_rows(self.page), await _audit_rows(self.page)

    def changing(self, action: str):  # noqa: ANN202 - a Gradio handler, its request found by its annotation
        async def handler(name: str, cls: str, daily_tokens: float | None, request: gr.Request) -> tuple:
            return await self.change(action, name, cls, daily_tokens, request)

        return handler


async def _usage_by_day(page: Page, days: int) -> list[list]:
    services = page.services
    end = int(time.time()) // DAY * DAY + DAY
    start = end - max(1, min(90, days)) * DAY
    rows = await usage_rows(services.pipeline.usage, services.usage_file, start, end)
    found = usage_page(rows, start, end, "1d", 90, ("api_key_id",), services.engine.capabilities.model)
    return [
        [
            time.strftime("%Y-%m-%d", time.gmtime(b["start_time"])),
            r["api_key_id"],
            r["num_model_requests"],
            r["input_tokens"],
            r["output_tokens"],
        ]
        for b in found.buckets
        for r in b["results"]
    ]


def _now_rows(page: Page) -> list[list]:
    now, out = page.services.scheduler.clock(), []
    for ticket in list(page.services.scheduler.state.tickets.values()):
        r = ticket.request
        waited = (r.dispatched_at or now) - r.arrival
        out.append(
            [r.caller, r.priority.value, r.state.value, round(waited, 1), r.prompt.num_tokens, r.params.max_tokens]
        )
    return out


async def _key_rows(page: Page) -> list[list]:
    services = page.services
    if services.key_store is None:
        return [[c.name, c.key_class.value if c.key_class else "", "config", "", ""] for c in services.keyring.named()]
    return [
        [
            k["name"],
            k["class"] or "",
            k["source"],
            ", ".join(f"{n} {v}" for n, v in k["limits"].items() if v),
            time.strftime("%Y-%m-%d %H:%M", time.gmtime(k["created_at"])) if k["created_at"] else "",
        ]
        for k in await key_admin.listed(services.keyring, services.key_store)
    ]


async def _audit_rows(page: Page) -> list[list]:
    store = page.services.key_store
    if store is None:
        return []
    return [
        [
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e["at"])),
            e["actor"],
            e["action"],
            e["target"],
            ", ".join(f"{k} {v}" for k, v in e["detail"].items() if v is not None),
        ]
        for e in await store.audit_log(50)
    ]
