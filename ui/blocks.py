"""The Gradio page: layout and wiring only. Every handler acts as the signed-in caller, through
the same pipeline as the HTTP API."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, AsyncIterator

import gradio as gr
import pandas as pd

from pipeline.caller import Caller
from pipeline.events import Finished, Queued, ReasoningDelta, Refused, Started, TextDelta
from scheduler.snapshot import snapshot
from settings.schema import SchedulerConfig, field_bounds
from ui.batch import BatchInputError, parse_prompts, run_batch, write_results
from ui.chat import ChatSettings, run_chat
from ui.i18n import EN, ZH, message
from ui.monitor import MonitorHistory, figures
from ui.accounts import users_markdown
from ui.views import ShownAnswer, answer_info, header_html, monitor_markdown
from ui.operator import SettingsError, apply_limits, apply_preset
from ui.session import COOKIE, Sessions
from wiring import Services

CSS = """
#queue-toast { position: fixed; top: 16px; right: 16px; z-index: 1000; max-width: 360px;
  background: #fff7e0; border: 1px solid #e0b000; border-radius: 8px; padding: 6px 14px;
  box-shadow: 0 2px 10px rgba(0,0,0,.15); }
#header form { display: inline; } #header button { background: none; border: 0; text-decoration: underline;
  cursor: pointer; color: inherit; padding: 0; font: inherit; }
"""
QUEUE_POLL_S = 0.05
LANG_JS = "() => (navigator.language || 'en').toLowerCase().startsWith('zh') ? '中文' : 'English'"
I18N = gr.I18n(en=EN, **{"zh-CN": ZH, "zh": ZH})
PLOTS = (("waiting", "queue_plot", "requests"), ("memory_gb", "memory_plot", "GiB"),
         ("tokens_per_s", "throughput_plot", "tokens/s"))


def build_ui(services: Services, sessions: Sessions, config_path: str) -> gr.Blocks:
    t = I18N
    history = MonitorHistory()
    cfg = services.config
    pipeline, scheduler, engine = services.pipeline, services.scheduler, services.engine

    def caller_of(request: gr.Request) -> Caller:
        caller = sessions.caller(request.cookies.get(COOKIE)) if request is not None else None
        if caller is None:
            raise gr.Error("sign in first")
        return caller

    with gr.Blocks(title="GPT-OSS WebUI") as demo:
        with gr.Row():
            header = gr.HTML(header_html(services, None, "en"), elem_id="header")
            lang = gr.Radio(["English", "中文"], value="English", label=t("language"), elem_id="language", scale=0)
        toast = gr.Markdown(visible=False, elem_id="queue-toast")
        with gr.Tab(t("chat"), elem_id="tab-chat") as chat_tab:
            chatbot = gr.Chatbot(elem_id="chatbot", height=420, buttons=["copy"])
            answer_info = gr.Markdown(elem_id="answer-info")
            with gr.Row():
                msg = gr.Textbox(label=t("message"), placeholder=t("message_hint"), scale=6, elem_id="message")
                send = gr.Button(t("send"), variant="primary", scale=1, elem_id="send")
                stop = gr.Button(t("stop"), variant="stop", scale=1, elem_id="stop")
            with gr.Row():
                retry = gr.Button(t("retry"), elem_id="retry")
                clear = gr.Button(t("clear"), elem_id="clear")
            with gr.Accordion(t("advanced"), open=False, elem_id="advanced") as advanced:
                system = gr.Textbox(label=t("system_prompt"), lines=2, elem_id="system-prompt")
                priority = gr.Radio(["high", "medium", "low"], value="medium", label=t("priority"), elem_id="priority")
                max_len = engine.capabilities.max_model_len
                max_tokens = gr.Slider(1, max_len, value=min(512, max_len), step=1, label=t("max_tokens"))
                temperature = gr.Slider(0, 2, value=0.7, step=0.05, label=t("temperature"))
                top_p = gr.Slider(0.05, 1, value=1.0, step=0.05, label=t("top_p"))
                reasoning = gr.Radio(["low", "medium", "high"], value="medium", label=t("reasoning"))
                timeout = gr.Number(300, minimum=1, label=t("timeout"))
                with gr.Group(visible=not sessions.required, elem_id="operator") as operator:
                    server_wide = gr.Markdown(f"#### {EN['server_wide']}")
                    lo, hi = field_bounds(SchedulerConfig, "max_concurrency")
                    with gr.Row():
                        concurrency = gr.Number(cfg.scheduler.max_concurrency, precision=0, minimum=lo, maximum=hi,
                                                label=t("max_concurrency"), elem_id="max-concurrency")
                        queue_size = gr.Number(cfg.scheduler.max_queue_size, precision=0, label=t("queue_size"),
                                               elem_id="queue-size")
                        low_wait = gr.Number(cfg.scheduler.max_wait_s.low, label=t("low_wait"), elem_id="low-wait")
                    apply = gr.Button(t("apply"), elem_id="apply-limits")
                    with gr.Row():
                        preset = gr.Dropdown(["personal", "team", "teaching"], value=None, label=t("preset"))
                        apply_preset_button = gr.Button(t("apply_preset"), elem_id="apply-preset")
                    operator_status = gr.Markdown(elem_id="operator-status")
        with gr.Tab(t("monitor"), elem_id="tab-monitor") as monitor_tab:
            monitor = gr.Markdown(elem_id="monitor")
            with gr.Row():
                plots = [gr.LinePlot(pd.DataFrame(history.rows(name)), x="minutes", y="value", label=t(key),
                                     x_title="minutes ago", y_title=unit, x_lim=[-history.window_s / 60, 0],
                                     y_lim=[0, None], height=240) for name, key, unit in PLOTS]
            timer = gr.Timer(1.5)
        with gr.Tab(t("batch"), elem_id="tab-batch") as batch_tab:
            prompts = gr.Textbox(label=t("prompts"), lines=6, elem_id="batch-prompts")
            upload = gr.File(label=t("upload"), file_types=[".txt", ".jsonl"], type="filepath")
            with gr.Row():
                batch_priority = gr.Radio(["high", "medium", "low"], value="low", label=t("priority"))
                batch_concurrency = gr.Slider(1, 32, value=4, step=1, label=t("concurrency"))
            run = gr.Button(t("run_batch"), variant="primary", elem_id="run-batch")
            batch_status = gr.Markdown(elem_id="batch-status")
            table = gr.Dataframe(headers=["#", "prompt", "answer", "status", "tokens", "queue_wait_s", "reasoning"],
                                 label=t("results"), elem_id="batch-table", wrap=True)
            with gr.Row():
                download_jsonl = gr.DownloadButton(t("download_jsonl"), visible=False, elem_id="download-jsonl")
                download_csv = gr.DownloadButton(t("download_csv"), visible=False, elem_id="download-csv")

        settings_inputs = [system, priority, max_tokens, temperature, top_p, reasoning, timeout, lang]

        async def respond(text: str, chat: list, system_prompt: str, prio: str, max_tok: float, temp: float,
                          top: float, effort: str, limit: float, language: str,
                          request: gr.Request) -> AsyncIterator[tuple]:
            caller = caller_of(request)
            if not text.strip():
                yield chat, text, gr.update(visible=False), ""
                return
            chat = [*chat, {"role": "user", "content": text}]
            settings = _settings(system_prompt, prio, max_tok, temp, top, effort, limit)
            async for shown, toast_update, info in _answer(services, caller, chat, settings, language):
                yield shown, "", toast_update, info

        async def redo(chat: list, system_prompt: str, prio: str, max_tok: float, temp: float, top: float,
                       effort: str, limit: float, language: str, request: gr.Request) -> AsyncIterator[tuple]:
            caller = caller_of(request)
            while chat and chat[-1]["role"] == "assistant":
                chat = chat[:-1]
            if not chat:
                yield chat, gr.update(visible=False), ""
                return
            settings = _settings(system_prompt, prio, max_tok, temp, top, effort, limit)
            async for update in _answer(services, caller, chat, settings, language):
                yield update

        def header_now(language: str, request: gr.Request) -> str:
            return header_html(services, caller_of(request), _code(language))

        chat_outputs = [chatbot, msg, toast, answer_info]
        events = [
            send.click(respond, [msg, chatbot, *settings_inputs], chat_outputs, concurrency_limit=None),
            msg.submit(respond, [msg, chatbot, *settings_inputs], chat_outputs, concurrency_limit=None),
            retry.click(redo, [chatbot, *settings_inputs], [chatbot, toast, answer_info], concurrency_limit=None),
        ]
        for event in events:  # the usage line under the header counts the answer just given
            event.then(header_now, lang, header, concurrency_limit=None, show_progress="hidden")
        stop.click(lambda: gr.update(visible=False), None, toast, cancels=events, concurrency_limit=None)
        clear.click(lambda: ([], gr.update(visible=False), ""), None, [chatbot, toast, answer_info],
                    cancels=events, concurrency_limit=None)

        def limits(conc: float, size: float, wait: float, request: gr.Request) -> str:
            try:
                return apply_limits(scheduler, engine, caller_of(request), int(conc), int(size), float(wait))
            except SettingsError as exc:
                gr.Warning(str(exc))
                return f"⚠️ {exc}"

        def use_preset(name: str | None, request: gr.Request) -> tuple:
            caller = caller_of(request)
            if not name:
                return gr.update(), gr.update(), gr.update(), ""
            try:
                conc, size, wait = apply_preset(scheduler, caller, name, config_path)
            except SettingsError as exc:
                gr.Warning(str(exc))
                return gr.update(), gr.update(), gr.update(), f"⚠️ {exc}"
            return conc, size, wait, f"preset {name} applied"

        apply.click(limits, [concurrency, queue_size, low_wait], operator_status, concurrency_limit=None)
        apply_preset_button.click(use_preset, [preset], [concurrency, queue_size, low_wait, operator_status],
                                  concurrency_limit=None)

        def refresh(language: str, request: gr.Request) -> tuple:
            caller = caller_of(request)
            snap = snapshot(scheduler)
            history.sample(snap, services.gpu)
            view = figures(snap, services.gpu, services.cache, history)
            code = _code(language)
            return (header_html(services, caller, code),
                    monitor_markdown(view, code) + users_markdown(services, caller, code),
                    *(pd.DataFrame(history.rows(name)) for name, _, _ in PLOTS))

        timer.tick(refresh, lang, [header, monitor, *plots], concurrency_limit=None, show_progress="hidden")

        async def batch(text: str, file: str | None, prio: str, conc: float, language: str,
                        request: gr.Request, progress: gr.Progress = gr.Progress()) -> tuple:
            caller = caller_of(request)
            try:
                items = parse_prompts(text, file)
            except BatchInputError as exc:
                gr.Warning(str(exc))
                return f"⚠️ {exc}", gr.update(), gr.update(visible=False), gr.update(visible=False)
            progress((0, len(items)), desc="batch")
            results = await run_batch(pipeline, caller, items, ChatSettings(priority=prio, temperature=0.7),
                                      int(conc), lambda done, total: progress((done, total), desc="batch"))
            folder = Path(tempfile.mkdtemp(prefix="gptoss-batch-"))
            rows = [[r.index + 1, r.prompt, r.answer, r.status, r.tokens, r.queue_wait_s, r.reasoning]
                    for r in results]
            return (message(_code(language), "batch_done", n=len(results)), rows,
                    gr.update(value=str(write_results(results, "jsonl", folder)), visible=True),
                    gr.update(value=str(write_results(results, "csv", folder)), visible=True))

        run.click(batch, [prompts, upload, batch_priority, batch_concurrency, lang],
                  [batch_status, table, download_jsonl, download_csv], concurrency_limit=None
                  ).then(header_now, lang, header, concurrency_limit=None, show_progress="hidden")

        def on_load(language: str, request: gr.Request) -> tuple:
            caller = caller_of(request)
            return header_html(services, caller, _code(language)), gr.update(visible=caller.admin)

        relabelled = {chat_tab: "chat", monitor_tab: "monitor", batch_tab: "batch", msg: "message", send: "send",
                      stop: "stop", retry: "retry", clear: "clear", advanced: "advanced", system: "system_prompt",
                      priority: "priority", max_tokens: "max_tokens", temperature: "temperature", top_p: "top_p",
                      reasoning: "reasoning", timeout: "timeout", concurrency: "max_concurrency",
                      queue_size: "queue_size", low_wait: "low_wait", apply: "apply", preset: "preset",
                      apply_preset_button: "apply_preset", prompts: "prompts", upload: "upload",
                      batch_priority: "priority", batch_concurrency: "concurrency", run: "run_batch",
                      table: "results", download_jsonl: "download_jsonl", download_csv: "download_csv",
                      lang: "language", server_wide: "server_wide",
                      **{plot: key for plot, (_, key, _) in zip(plots, PLOTS)}}

        def relabel(language: str, request: gr.Request) -> list:
            caller = caller_of(request)
            code = _code(language)
            updates = [_relabel(component, key, code) for component, key in relabelled.items()]
            return [*updates, header_html(services, caller, code)]

        demo.load(None, None, lang, js=LANG_JS)
        demo.load(on_load, lang, [header, operator], concurrency_limit=None)
        # on the user's switch only: the browser-language default already has Gradio's own labels
        lang.input(relabel, lang, [*relabelled, header], concurrency_limit=None, show_progress="hidden")
    demo.queue(default_concurrency_limit=None)
    slow_queue_polling(demo)
    return demo


def slow_queue_polling(demo: gr.Blocks) -> None:
    """Gradio's event queue polls every millisecond while idle (its own Windows default is 50 ms).
    In the process that also runs the engine's front end, on a machine whose CPUs vLLM's engine
    processes hold under load, those thousand wake-ups a second starved every other process for up
    to 3 s at a time (bench/load.py's machine stalls); at 50 ms none were seen. Page events start
    at most 50 ms later."""
    queue = demo._queue
    if not hasattr(queue, "sleep_when_free"):
        raise RuntimeError("this Gradio's queue has no sleep_when_free: check ui/blocks.py against its queueing.py")
    queue.sleep_when_free = QUEUE_POLL_S


def _settings(system: str, priority: str, max_tokens: float, temperature: float, top_p: float, reasoning: str,
              timeout: float) -> ChatSettings:
    return ChatSettings(priority, int(max_tokens), float(temperature), float(top_p), reasoning,
                        float(timeout or 300), system or "")


async def _answer(services: Services, caller: Caller, chat: list, settings: ChatSettings,
                  language: str) -> AsyncIterator[tuple]:
    """(chat, toast, info) updates for one answer."""
    code = _code(language)
    hidden = gr.update(visible=False)
    shown = ShownAnswer(chat, message(code, "thinking"))
    yield shown.messages(), hidden, ""
    priority = ""
    async for event in run_chat(services.pipeline, caller, chat, settings):
        if isinstance(event, Started):
            priority = event.priority
        elif isinstance(event, Queued):
            note = message(code, "queued", position=event.position, length=event.queue_length)
            if event.estimated_wait_s is not None:
                note += message(code, "eta", s=event.estimated_wait_s)
            yield shown.messages(), gr.update(value=note, visible=True), ""
        elif isinstance(event, ReasoningDelta):
            shown.think(event.text)
            yield shown.messages(), hidden, gr.update()
        elif isinstance(event, TextDelta):
            shown.say(event.text)
            yield shown.messages(), hidden, gr.update()
        elif isinstance(event, Finished):
            shown.finish(event.text, event.reasoning)
            yield shown.messages(), hidden, answer_info(event, caller, priority, code)
        elif isinstance(event, Refused):
            shown.stop_thinking()
            refusal = event.refusal
            if refusal.retry_after_s is not None:
                text = message(code, "busy", message=refusal.message, retry=refusal.retry_after_s)
            else:
                text = message(code, "error", message=refusal.message)
            gr.Warning(text)
            yield shown.messages(), hidden, f"⚠️ {text}"


def _relabel(component: Any, key: str, code: str) -> dict:
    text = message(code, key)
    if isinstance(component, (gr.Button, gr.DownloadButton)):
        return gr.update(value=text)
    if isinstance(component, gr.Markdown):
        return gr.update(value=f"#### {text}")
    if key == "message":
        return gr.update(label=text, placeholder=message(code, "message_hint"))
    return gr.update(label=text)


def _code(language: str) -> str:
    return "zh" if language == "中文" else "en"
