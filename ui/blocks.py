"""The Gradio page: layout and wiring only. The logic lives in ui/chat.py, ui/batch.py,
ui/monitor.py and ui/operator.py, and every call goes to the in-process scheduler."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, AsyncIterator

import gradio as gr
import pandas as pd

from api.services import Services
from ui.batch import BatchInputError, parse_prompts, run_batch, write_results
from ui.chat import ChatEvent, ChatSettings, run_chat
from ui.i18n import EN, ZH, message
from ui.monitor import MonitorHistory, snapshot
from ui.operator import SettingsError, apply_limits, apply_preset

CSS = """
#queue-toast { position: fixed; top: 16px; right: 16px; z-index: 1000; max-width: 360px;
  background: #fff7e0; border: 1px solid #e0b000; border-radius: 8px; padding: 6px 14px;
  box-shadow: 0 2px 10px rgba(0,0,0,.15); }
"""
LANG_JS = "() => (navigator.language || 'en').toLowerCase().startsWith('zh') ? '中文' : 'English'"
I18N = gr.I18n(en=EN, **{"zh-CN": ZH, "zh": ZH})


def build_ui(services: Services, config_path: str) -> gr.Blocks:
    t = I18N
    history = MonitorHistory()
    cfg = services.config
    with gr.Blocks(title="GPT-OSS WebUI") as demo:
        lang = gr.Radio(["English", "中文"], value="English", label=t("language"), elem_id="language")
        toast = gr.Markdown(visible=False, elem_id="queue-toast")
        with gr.Tab(t("chat"), elem_id="tab-chat"):
            chatbot = gr.Chatbot(elem_id="chatbot", height=420, buttons=["copy"])
            answer_info = gr.Markdown(elem_id="answer-info")
            system = gr.Textbox(label=t("system_prompt"), lines=1, elem_id="system-prompt")
            with gr.Row():
                msg = gr.Textbox(label=t("message"), placeholder=t("message_hint"), scale=6, elem_id="message")
                send = gr.Button(t("send"), variant="primary", scale=1, elem_id="send")
                stop = gr.Button(t("stop"), variant="stop", scale=1, elem_id="stop")
            with gr.Row():
                retry = gr.Button(t("retry"), elem_id="retry")
                clear = gr.Button(t("clear"), elem_id="clear")
            with gr.Accordion(t("advanced"), open=False, elem_id="advanced"):
                priority = gr.Radio(["high", "medium", "low"], value="medium", label=t("priority"), elem_id="priority")
                max_len = services.engine.capabilities.max_model_len
                max_tokens = gr.Slider(1, max_len, value=min(512, max_len), step=1, label=t("max_tokens"))
                temperature = gr.Slider(0, 2, value=0.7, step=0.05, label=t("temperature"))
                top_p = gr.Slider(0.05, 1, value=1.0, step=0.05, label=t("top_p"))
                reasoning = gr.Radio(["low", "medium", "high"], value="medium", label=t("reasoning"))
                timeout = gr.Number(300, minimum=1, label=t("timeout"))
                gr.Markdown(f"#### {EN['server_wide']} / {ZH['server_wide']}")
                admin_key = gr.Textbox(label=t("admin_key"), type="password", visible=bool(cfg.server.admin_keys))
                with gr.Row():
                    concurrency = gr.Number(cfg.scheduler.max_concurrency, precision=0, label=t("max_concurrency"),
                                            elem_id="max-concurrency")
                    queue_size = gr.Number(cfg.scheduler.max_queue_size, precision=0, label=t("queue_size"),
                                           elem_id="queue-size")
                    low_wait = gr.Number(cfg.scheduler.max_wait_s.low, label=t("low_wait"), elem_id="low-wait")
                apply = gr.Button(t("apply"), elem_id="apply-limits")
                with gr.Row():
                    preset = gr.Dropdown(["personal", "team", "teaching"], value=None, label=t("preset"))
                    apply_preset_button = gr.Button(t("apply_preset"), elem_id="apply-preset")
                operator_status = gr.Markdown(elem_id="operator-status")
        with gr.Tab(t("monitor"), elem_id="tab-monitor"):
            monitor = gr.Markdown(elem_id="monitor")
            with gr.Row():
                queue_plot = gr.LinePlot(x="seconds", y="value", label=t("queue_plot"), height=220)
                memory_plot = gr.LinePlot(x="seconds", y="value", label=t("memory_plot"), height=220)
                speed_plot = gr.LinePlot(x="seconds", y="value", label=t("throughput_plot"), height=220)
            timer = gr.Timer(1.5)
        with gr.Tab(t("batch"), elem_id="tab-batch"):
            prompts = gr.Textbox(label=t("prompts"), lines=6, elem_id="batch-prompts")
            upload = gr.File(label=t("upload"), file_types=[".txt", ".jsonl"], type="filepath")
            with gr.Row():
                batch_priority = gr.Radio(["high", "medium", "low"], value="low", label=t("priority"))
                batch_concurrency = gr.Slider(1, 32, value=4, step=1, label=t("concurrency"))
            run = gr.Button(t("run_batch"), variant="primary", elem_id="run-batch")
            batch_status = gr.Markdown(elem_id="batch-status")
            table = gr.Dataframe(headers=["#", "prompt", "answer", "status", "tokens", "queue_wait_s"],
                                 label=t("results"), elem_id="batch-table", wrap=True)
            with gr.Row():
                download_jsonl = gr.DownloadButton(t("download_jsonl"), visible=False, elem_id="download-jsonl")
                download_csv = gr.DownloadButton(t("download_csv"), visible=False, elem_id="download-csv")

        settings_inputs = [system, priority, max_tokens, temperature, top_p, reasoning, timeout, lang]

        async def respond(text: str, chat: list, *values: Any) -> AsyncIterator[tuple]:
            if not text.strip():
                yield chat, text, gr.update(visible=False), ""
                return
            chat = [*chat, {"role": "user", "content": text}]
            async for update in _answer(services, chat, *values):
                yield update[0], "", update[1], update[2]

        async def redo(chat: list, *values: Any) -> AsyncIterator[tuple]:
            while chat and chat[-1]["role"] == "assistant":
                chat = chat[:-1]
            if not chat:
                yield chat, gr.update(visible=False), ""
                return
            async for update in _answer(services, chat, *values):
                yield update

        chat_outputs = [chatbot, msg, toast, answer_info]
        events = [
            send.click(respond, [msg, chatbot, *settings_inputs], chat_outputs, concurrency_limit=None),
            msg.submit(respond, [msg, chatbot, *settings_inputs], chat_outputs, concurrency_limit=None),
            retry.click(redo, [chatbot, *settings_inputs], [chatbot, toast, answer_info], concurrency_limit=None),
        ]
        stop.click(lambda: gr.update(visible=False), None, toast, cancels=events, concurrency_limit=None)
        clear.click(lambda: ([], gr.update(visible=False), ""), None, [chatbot, toast, answer_info],
                    cancels=events, concurrency_limit=None)

        def limits(key: str, conc: float, size: float, wait: float) -> str:
            try:
                return apply_limits(services, int(conc), int(size), float(wait), key)
            except SettingsError as exc:
                gr.Warning(str(exc))
                return f"⚠️ {exc}"

        def use_preset(key: str, name: str | None) -> tuple:
            if not name:
                return gr.update(), gr.update(), gr.update(), ""
            try:
                conc, size, wait = apply_preset(services, name, config_path, key)
            except SettingsError as exc:
                gr.Warning(str(exc))
                return gr.update(), gr.update(), gr.update(), f"⚠️ {exc}"
            return conc, size, wait, f"preset {name} applied"

        apply.click(limits, [admin_key, concurrency, queue_size, low_wait], operator_status, concurrency_limit=None)
        apply_preset_button.click(use_preset, [admin_key, preset], [concurrency, queue_size, low_wait, operator_status],
                                  concurrency_limit=None)

        def refresh(language: str) -> tuple:
            history.sample(services)
            return (_monitor_markdown(snapshot(services, history), language),
                    pd.DataFrame(history.rows("waiting")), pd.DataFrame(history.rows("memory_gb")),
                    pd.DataFrame(history.rows("tokens_per_s")))

        timer.tick(refresh, lang, [monitor, queue_plot, memory_plot, speed_plot], concurrency_limit=None,
                   show_progress="hidden")

        async def batch(text: str, file: str | None, prio: str, conc: float, language: str,
                        progress: gr.Progress = gr.Progress()) -> tuple:
            try:
                items = parse_prompts(text, file)
            except BatchInputError as exc:
                gr.Warning(str(exc))
                return f"⚠️ {exc}", gr.update(), gr.update(visible=False), gr.update(visible=False)
            progress((0, len(items)), desc="batch")
            results = await run_batch(services, items, ChatSettings(priority=prio, temperature=0.7), int(conc),
                                      lambda done, total: progress((done, total), desc="batch"))
            folder = Path(tempfile.mkdtemp(prefix="gptoss-batch-"))
            rows = [[r.index + 1, r.prompt, r.answer, r.status, r.tokens, r.queue_wait_s] for r in results]
            return (message(_code(language), "batch_done", n=len(results)), rows,
                    gr.update(value=str(write_results(results, "jsonl", folder)), visible=True),
                    gr.update(value=str(write_results(results, "csv", folder)), visible=True))

        run.click(batch, [prompts, upload, batch_priority, batch_concurrency, lang],
                  [batch_status, table, download_jsonl, download_csv], concurrency_limit=None)
        demo.load(None, None, lang, js=LANG_JS)
    demo.queue(default_concurrency_limit=None)
    return demo


async def _answer(services: Services, chat: list, system: str, priority: str, max_tokens: float,
                  temperature: float, top_p: float, reasoning: str, timeout: float,
                  language: str) -> AsyncIterator[tuple]:
    """(chat, toast, info) updates for one answer."""
    code = _code(language)
    settings = ChatSettings(priority, int(max_tokens), float(temperature), float(top_p), reasoning,
                            float(timeout or 300), system or "")
    shown = [*chat, {"role": "assistant", "content": ""}]
    yield shown, gr.update(visible=False), ""
    async for event in run_chat(services, chat, settings):
        shown[-1] = {"role": "assistant", "content": event.text or shown[-1]["content"]}
        yield shown, *_event_view(event, code)


def _event_view(event: ChatEvent, code: str) -> tuple:
    hidden = gr.update(visible=False)
    if event.kind == "queued":
        text = message(code, "queued", position=event.position, length=event.queue_length)
        if event.eta_s is not None:
            text += message(code, "eta", s=event.eta_s)
        return gr.update(value=text, visible=True), ""
    if event.kind == "rejected":
        gr.Warning(message(code, "busy", message=event.message, retry=event.retry_after_s))
        return hidden, ""
    if event.kind == "error":
        gr.Warning(message(code, "error", message=event.message))
        return hidden, ""
    if event.kind == "done":
        info = event.info
        return hidden, message(code, "info", priority=info.get("priority"), wait=info.get("queue_wait_s", 0.0),
                               tokens=info.get("tokens", 0), speed=info.get("tokens_per_s", "–"),
                               cache=message(code, "yes" if info.get("cached") else "no"))
    return hidden, gr.update()


def _monitor_markdown(s: dict, language: str) -> str:
    code = _code(language)
    if s["gpus"]:
        memory = "\n".join(f"- GPU {g['index']} {g['name']}: {g['used_gb']:.1f} / {g['total_gb']:.1f} GiB, "
                           f"{g['utilization_pct']:.0f}% busy" for g in s["gpus"])
    else:
        kv = "–" if s["kv_usage_pct"] is None else f"{s['kv_usage_pct']:.1f}%"
        memory = (f"{message(code, 'no_gpu')}\n\n- process memory: {s['process_memory_gb']:.2f} GiB\n"
                  f"- KV cache in use: {kv}")
    waiting = s["waiting"]
    hit = "–" if s["cache_hit_rate"] is None else f"{100 * s['cache_hit_rate']:.0f}%"
    tpot = "–" if s["tpot_s"] is None else f"{1000 * s['tpot_s']:.0f} ms"
    return (f"{memory}\n\n| waiting high / medium / low | running / limit | time per token (objective) | avg wait | "
            f"tokens/s | cache hit rate | emergency | admissions |\n|---|---|---|---|---|---|---|---|\n"
            f"| {waiting['high']} / {waiting['medium']} / {waiting['low']} | {s['running']} / {s['slots']} | "
            f"{tpot} ({1000 * s['tpot_objective_s']:.0f} ms) | {s['avg_wait_s']:.1f} s | {s['tokens_per_s']:.1f} | {hit} | "
            f"{'ON' if s['emergency'] else 'off'} | {'paused' if s['admission_paused'] else 'open'} |")


def _code(language: str) -> str:
    return "zh" if language == "中文" else "en"
