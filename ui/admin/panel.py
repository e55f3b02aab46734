"""The operators' part of Advanced settings: the server-wide limits and presets, shown to admins
(and on an open page); every change is checked again against the caller (ui.admin.operator)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from settings.schema import SchedulerConfig, field_bounds
from ui.admin.operator import SettingsError, apply_limits, apply_preset
from ui.i18n import EN
from ui.page import Labels, Page


@dataclass(slots=True)
class OperatorPanel:
    group: gr.Group
    labels: Labels


def build_operator_panel(page: Page, t: gr.I18n) -> OperatorPanel:
    cfg, scheduler, engine = page.services.config, page.services.scheduler, page.services.engine
    with gr.Group(visible=not page.sessions.required, elem_id="operator") as group:
        server_wide = gr.Markdown(f"#### {EN['server_wide']}")
        lo, hi = field_bounds(SchedulerConfig, "max_concurrency")
        with gr.Row():
            concurrency = gr.Number(
                cfg.scheduler.max_concurrency,
                precision=0,
                minimum=lo,
                maximum=hi,
                label=t("max_concurrency"),
                elem_id="max-concurrency",
            )
            queue_size = gr.Number(
                cfg.scheduler.max_queue_size, precision=0, label=t("queue_size"), elem_id="queue-size"
            )
            low_wait = gr.Number(cfg.scheduler.max_wait_s.low, label=t("low_wait"), elem_id="low-wait")
        apply = gr.Button(t("apply"), elem_id="apply-limits")
        with gr.Row():
            preset = gr.Dropdown(["personal", "team", "teaching"], value=None, label=t("preset"))
            apply_preset_button = gr.Button(t("apply_preset"), elem_id="apply-preset")
        operator_status = gr.Markdown(elem_id="operator-status")

    def limits(conc: float, size: float, wait: float, request: gr.Request) -> str:
        try:
            return apply_limits(scheduler, engine, page.caller_of(request), int(conc), int(size), float(wait))
        except SettingsError as exc:
            gr.Warning(str(exc))
            return f"⚠️ {exc}"

    def use_preset(name: str | None, request: gr.Request) -> tuple:
        caller = page.caller_of(request)
        if not name:
            return gr.update(), gr.update(), gr.update(), ""
        try:
            conc, size, wait = apply_preset(scheduler, caller, name, page.config_path)
        except SettingsError as exc:
            gr.Warning(str(exc))
            return gr.update(), gr.update(), gr.update(), f"⚠️ {exc}"
        return conc, size, wait, f"preset {name} applied"

    apply.click(limits, [concurrency, queue_size, low_wait], operator_status, concurrency_limit=None)
    apply_preset_button.click(
        use_preset, [preset], [concurrency, queue_size, low_wait, operator_status], concurrency_limit=None
    )
    return OperatorPanel(
        group,
        {
            concurrency: "max_concurrency",
            queue_size: "queue_size",
            low_wait: "low_wait",
            apply: "apply",
            preset: "preset",
            apply_preset_button: "apply_preset",
            server_wide: "server_wide",
        },
    )
