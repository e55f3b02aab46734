"""The chat column of the Chat tab: the chat, the message box and its buttons, and Advanced
settings (the chat's settings form and the operators' panel); laid out by `build_chat`, its
events wired by `wire_chat` to the handlers (ui.chat.handlers). The sidebar beside it is
ui.history's; ui.blocks puts the two side by side."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import gradio as gr

from ui.admin.panel import OperatorPanel, build_operator_panel
from ui.chat.handlers import ChatHandlers
from ui.chat.parts import ChatParts
from ui.chat.settings_form import SettingsForm, build_settings_form
from ui.page import Labels, Page

# $$...$$ and \[...\] on a line of their own, $...$ and \(...\) inline, as the models write them
LATEX: list[dict[str, str | bool]] = [
    {"left": "$$", "right": "$$", "display": True},
    {"left": "\\[", "right": "\\]", "display": True},
    {"left": "$", "right": "$", "display": False},
    {"left": "\\(", "right": "\\)", "display": False},
]


@dataclass(slots=True)
class ChatColumn:
    conversation: gr.State  # the open conversation's id
    served: gr.State  # a similar question's answer shown (ui.chat.call.Served); kept on the server
    chatbot: gr.Chatbot
    info: gr.Markdown
    msg: gr.Textbox
    send: gr.Button
    stop: gr.Button
    retry: gr.Button
    ask: gr.Button
    clear: gr.Button
    advanced: gr.Accordion
    settings: SettingsForm
    operator: OperatorPanel

    def asked(self, page: Page) -> list[Any]:
        """What every answering event sends last, as ui.chat.handlers.Asked reads it."""
        return [*self.settings.inputs, page.lang, self.conversation]

    @property
    def labels(self) -> Labels:
        return {
            self.msg: "message",
            self.send: "send",
            self.stop: "stop",
            self.retry: "retry",
            self.clear: "clear",
            self.ask: "ask_model",
            self.advanced: "advanced",
            **self.settings.labels,
            **self.operator.labels,
        }


def build_chat(page: Page, t: gr.I18n) -> ChatColumn:
    conversation, served = gr.State(None), gr.State(None)
    chatbot = gr.Chatbot(
        elem_id="chatbot", height=420, buttons=["copy", "copy_all"], editable="user", latex_delimiters=LATEX
    )
    info = gr.Markdown(elem_id="answer-info")
    with gr.Row():
        msg = gr.Textbox(label=t("message"), placeholder=t("message_hint"), scale=6, elem_id="message")
        send = gr.Button(t("send"), variant="primary", scale=1, elem_id="send")
        stop = gr.Button(t("stop"), variant="stop", scale=1, elem_id="stop")
    with gr.Row():
        retry = gr.Button(t("retry"), elem_id="retry")
        ask = gr.Button(t("ask_model"), visible=False, elem_id="ask-model")
        clear = gr.Button(t("clear"), elem_id="clear")
    with gr.Accordion(t("advanced"), open=False, elem_id="advanced") as advanced:
        settings = build_settings_form(t, page.services.engine.capabilities.max_model_len)
        operator = build_operator_panel(page, t)
    return ChatColumn(
        conversation, served, chatbot, info, msg, send, stop, retry, ask, clear, advanced, settings, operator
    )


def wire_chat(page: Page, chat: ChatColumn) -> ChatParts:
    """The answering events, undo, stop and clear; what the sidebar needs of them comes back."""
    handlers = ChatHandlers(page)
    events = _answering(handlers, page, chat)
    cancellable = cast("list[dict[str, Any]]", events)  # Gradio takes its own events; its annotation says dicts
    similar = [chat.served, chat.ask]
    chat.chatbot.undo(
        handlers.undo,
        [chat.chatbot, chat.conversation],
        [chat.chatbot, chat.msg, chat.info],
        cancels=cancellable,
        concurrency_limit=None,
    ).then(ChatParts.no_similar, None, similar, concurrency_limit=None, show_progress="hidden")
    answered = [page.then_header(event) for event in events]
    chat.stop.click(lambda: gr.update(visible=False), None, page.toast, cancels=cancellable, concurrency_limit=None)
    chat.clear.click(
        lambda: ([], gr.update(visible=False), "", None, None, gr.update(visible=False)),
        None,
        [chat.chatbot, page.toast, chat.info, chat.conversation, *similar],
        cancels=cancellable,
        concurrency_limit=None,
    )
    return ChatParts(chat.chatbot, chat.conversation, chat.info, chat.msg, chat.settings, events, answered, similar)


def _answering(handlers: ChatHandlers, page: Page, chat: ChatColumn) -> list[Any]:
    """Send (button and Enter), Retry (ours and the chatbot's icon), an edit, and "ask the model instead"."""
    asked, box = chat.asked(page), [chat.msg, chat.chatbot]
    sent = [chat.chatbot, chat.msg, page.toast, chat.info, chat.conversation, chat.served, chat.ask]
    again = [chat.chatbot, page.toast, chat.info, chat.conversation, chat.served, chat.ask]
    return [
        chat.send.click(handlers.respond, [*box, *asked], sent, concurrency_limit=None),
        chat.msg.submit(handlers.respond, [*box, *asked], sent, concurrency_limit=None),
        chat.retry.click(handlers.redo, [chat.chatbot, *asked], again, concurrency_limit=None),
        chat.chatbot.retry(handlers.redo, [chat.chatbot, *asked], again, concurrency_limit=None),
        chat.chatbot.edit(handlers.edited, [chat.chatbot, *asked], again, concurrency_limit=None),
        chat.ask.click(handlers.ask_model, [chat.chatbot, chat.served, *asked], again, concurrency_limit=None),
    ]
