"""The Monitor tab: the scheduler's and the machine's figures, refreshed by a timer, with the
per-user table for admins."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from scheduler.snapshot import snapshot
from ui.account.usage import users_markdown
from ui.monitor.figures import MonitorHistory, figures, monitor_markdown
from ui.page import Labels, Page, code_of, header_html

PLOTS = (
    ("waiting", "queue_plot", "requests"),
    ("memory_gb", "memory_plot", "GiB"),
    ("tokens_per_s", "throughput_plot", "tokens/s"),
)


def build_monitor_tab(page: Page, t: gr.I18n) -> Labels:
    services = page.services
    history = MonitorHistory()
    with gr.Tab(t("monitor"), elem_id="tab-monitor") as tab:
        monitor = gr.Markdown(elem_id="monitor")
        with gr.Row():
            plots = [
                gr.LinePlot(
                    pd.DataFrame(history.rows(name)),
                    x="minutes",
                    y="value",
                    label=t(key),
                    x_title="minutes ago",
                    y_title=unit,
                    x_lim=[-history.window_s / 60, 0],
                    y_lim=[0, None],
                    height=240,
                )
                for name, key, unit in PLOTS
            ]
        timer = gr.Timer(1.5)

    def refresh(language: str, request: gr.Request) -> tuple:
        caller = page.caller_of(request)
        snap = snapshot(services.scheduler)
        history.sample(snap, services.gpu)
        view = figures(snap, services.gpu, services.cache, history)
        code = code_of(language)
        return (
            header_html(services, caller, code),
            monitor_markdown(view, code) + users_markdown(services, caller, code),
            *(pd.DataFrame(history.rows(name)) for name, _, _ in PLOTS),
        )

    timer.tick(refresh, page.lang, [page.header, monitor, *plots], concurrency_limit=None, show_progress="hidden")
    return {tab: "monitor", **{plot: key for plot, (_, key, _) in zip(plots, PLOTS)}}
