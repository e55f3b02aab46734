"""The Gradio page: the header and the Language switch, then one builder per part (the Chat tab:
ui.history's sidebar beside ui.chat's column with the operators' panel; ui.monitor.tab,
ui.batch.tab). Every handler acts as the signed-in caller, through the same pipeline as the HTTP
API."""

from __future__ import annotations

import gradio as gr

from conversations.store import HistoryStore
from settings.schema import HistoryConfig
from ui.account.session import Sessions
from ui.admin.tab import build_admin_tab
from ui.batch.tab import build_batch_tab
from ui.chat.tab import build_chat, wire_chat
from ui.history.sidebar import build_sidebar, wire_sidebar
from ui.i18n import EN, ZH
from ui.monitor.tab import build_monitor_tab
from ui.page import Labels, Page, code_of, header_html
from ui.page import relabel as relabelled
from wiring import Services

CSS = """
#queue-toast { position: fixed; top: 16px; right: 16px; z-index: 1000; max-width: 360px;
  background: #fff7e0; border: 1px solid #e0b000; border-radius: 8px; padding: 6px 14px;
  box-shadow: 0 2px 10px rgba(0,0,0,.15); }
#header form { display: inline; } #header button { background: none; border: 0; text-decoration: underline;
  cursor: pointer; color: inherit; padding: 0; font: inherit; }
#history-list { max-height: 420px; overflow-y: auto; }
"""
QUEUE_POLL_S = 0.05
LANG_JS = "() => (navigator.language || 'en').toLowerCase().startsWith('zh') ? '中文' : 'English'"
I18N = gr.I18n(en=EN, **{"zh-CN": ZH, "zh": ZH})


def build_ui(
    services: Services, sessions: Sessions, config_path: str, history: HistoryStore | None = None
) -> gr.Blocks:
    """`history` is opened and closed with the server (ui.mount); without one, none is kept."""
    t = I18N
    store = history if history is not None else HistoryStore(HistoryConfig(enabled=False))
    with gr.Blocks(title="GPT-OSS WebUI") as demo:
        with gr.Row():
            header = gr.HTML(header_html(services, None, "en"), elem_id="header")
            lang = gr.Radio(["English", "中文"], value="English", label=t("language"), elem_id="language", scale=0)
        toast = gr.Markdown(visible=False, elem_id="queue-toast")
        page = Page(demo, services, sessions, store, config_path, header, lang, toast)
        chat_labels, operator = build_chat_tab(page, t)
        labels = {**chat_labels, **build_monitor_tab(page, t), **build_batch_tab(page, t), lang: "language"}
        admin_labels, admin_tab = build_admin_tab(page, t)
        labels.update(admin_labels)

        def on_load(language: str, request: gr.Request) -> tuple:
            caller = page.caller_of(request)
            return (
                header_html(services, caller, code_of(language)),
                gr.update(visible=caller.admin),
                gr.update(visible=caller.admin and services.keyring.keys_required),
            )

        def relabel(language: str, request: gr.Request) -> list:
            caller = page.caller_of(request)
            code = code_of(language)
            updates = [relabelled(component, key, code) for component, key in labels.items()]
            return [*updates, header_html(services, caller, code)]

        demo.load(None, None, lang, js=LANG_JS)
        demo.load(on_load, lang, [header, operator, admin_tab], concurrency_limit=None)
        # on the user's switch only: the browser-language default already has Gradio's own labels
        lang.input(relabel, lang, [*labels, header], concurrency_limit=None, show_progress="hidden")
    demo.queue(default_concurrency_limit=None)
    slow_queue_polling(demo)
    return demo


def build_chat_tab(page: Page, t: gr.I18n) -> tuple[Labels, gr.Group]:
    """The tab's labels for the Language switch, and the operators' group (shown to admins)."""
    with gr.Tab(t("chat"), elem_id="tab-chat") as tab:
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=240, visible=page.history.config.enabled, elem_id="history"):
                sidebar = build_sidebar(t)
            with gr.Column(scale=4):
                chat = build_chat(page, t)
    wire_sidebar(page, sidebar, wire_chat(page, chat))
    return {tab: "chat", **chat.labels, **sidebar.labels}, chat.operator.group


def slow_queue_polling(demo: gr.Blocks) -> None:
    """Gradio's event queue polls every millisecond while idle, and its progress updates every 10 ms
    (its own Windows defaults are 50 and 100 ms). In the process that also runs the engine's front
    end, those thousand wake-ups a second starved the other processes under load (docs/BENCHMARKS.md,
    "Figures behind design choices"). Page events start, and progress shows, at most 50 ms later."""
    queue = demo._queue
    for name in ("sleep_when_free", "progress_update_sleep_when_free"):
        if not hasattr(queue, name):
            raise RuntimeError(f"this Gradio's queue has no {name}: check ui/blocks.py against its queueing.py")
        setattr(queue, name, QUEUE_POLL_S)
