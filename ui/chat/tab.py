"""The Chat tab: the conversation sidebar, the chat, its settings, and the events that answer:
send, regenerate (our Retry button and the chatbot's own retry icon), edit a past message and
answer again from there (the chatbot's `editable` / `.edit`), undo the last turn, stop, clear, and
"ask the model instead" after a similar question's answer from the cache.
Each writes the conversation to the history as it goes (ui.chat.answer)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import gradio as gr

from ui.admin.panel import build_operator_panel
from ui.chat.answer import Book, stream_answer
from ui.chat.call import ChatSettings, Served, report_similar, text_of, who_is
from ui.chat.parts import ChatParts
from ui.history.sidebar import build_sidebar, wire_sidebar
from ui.history.view import is_extra, stored_count
from ui.page import Labels, Page, code_of

# $$...$$ and \[...\] on a line of their own, $...$ and \(...\) inline, as the models write them
LATEX: list[dict[str, str | bool]] = [{"left": "$$", "right": "$$", "display": True}, {"left": "\\[", "right": "\\]", "display": True},
         {"left": "$", "right": "$", "display": False}, {"left": "\\(", "right": "\\)", "display": False}]


def build_chat_tab(page: Page, t: gr.I18n) -> tuple[Labels, gr.Group]:
    """The tab's labels for the Language switch, and the operators' group (shown to admins)."""
    engine = page.services.engine
    with gr.Tab(t("chat"), elem_id="tab-chat") as tab:
        conversation = gr.State(None)
        served = gr.State(None)  # a similar question's answer shown (ui.chat.Served); kept on the server
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=240, visible=page.history.config.enabled, elem_id="history"):
                sidebar = build_sidebar(t)
            with gr.Column(scale=4):
                chatbot = gr.Chatbot(elem_id="chatbot", height=420, buttons=["copy", "copy_all"], editable="user",
                                     latex_delimiters=LATEX)
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
                    system = gr.Textbox(label=t("system_prompt"), lines=2, elem_id="system-prompt")
                    priority = gr.Radio(["high", "medium", "low"], value="medium", label=t("priority"),
                                        elem_id="priority")
                    max_len = engine.capabilities.max_model_len
                    max_tokens = gr.Slider(1, max_len, value=min(512, max_len), step=1, label=t("max_tokens"))
                    temperature = gr.Slider(0, 2, value=0.7, step=0.05, label=t("temperature"))
                    top_p = gr.Slider(0.05, 1, value=1.0, step=0.05, label=t("top_p"))
                    reasoning = gr.Radio(["low", "medium", "high"], value="medium", label=t("reasoning"))
                    timeout = gr.Number(300, minimum=1, label=t("timeout"))
                    operator = build_operator_panel(page, t)

    settings = [system, priority, max_tokens, temperature, top_p, reasoning, timeout]
    inputs = [*settings, page.lang, conversation]

    def book(request: gr.Request, conversation_id: str | None) -> tuple[Any, Book]:
        caller, owner = page.owner_of(request)
        return caller, Book(page.history, owner, conversation_id)

    def served_as(similar: str | None, caller: Any, turns: Book) -> Served | None:
        return None if similar is None else Served(similar, who_is(caller, turns.owner))

    async def respond(text: str, chat: list, system_prompt: str, prio: str, max_tok: float, temp: float,
                      top: float, effort: str, limit: float, language: str, conversation_id: str | None,
                      request: gr.Request) -> AsyncIterator[tuple]:
        caller, turns = book(request, conversation_id)
        if not text.strip():
            yield chat, text, gr.update(visible=False), "", conversation_id, gr.skip(), gr.skip()
            return
        chat = [*chat, {"role": "user", "content": text}]
        chosen = _settings(system_prompt, prio, max_tok, temp, top, effort, limit)
        conversation_id = await turns.user_message(text, chosen)
        async for shown, toast, line, similar in stream_answer(page.services, caller, chat, chosen, code_of(language),
                                                               turns):
            yield (shown, "", toast, line, conversation_id, served_as(similar, caller, turns),
                   gr.update(visible=similar is not None))

    async def again(chat: list, chosen: ChatSettings, language: str, caller: Any,
                    turns: Book, exact: bool = False) -> AsyncIterator[tuple]:
        if not chat:
            yield chat, gr.update(visible=False), "", turns.conversation_id, gr.skip(), gr.skip()
            return
        await turns.cut(stored_count(chat), chosen)
        async for shown, toast, line, similar in stream_answer(page.services, caller, chat, chosen, code_of(language),
                                                               turns, exact):
            yield (shown, toast, line, turns.conversation_id, served_as(similar, caller, turns),
                   gr.update(visible=similar is not None))

    async def redo(chat: list, system_prompt: str, prio: str, max_tok: float, temp: float, top: float,
                   effort: str, limit: float, language: str, conversation_id: str | None,
                   request: gr.Request) -> AsyncIterator[tuple]:
        """Regenerates the last answer: it, and its Thinking and Details, go."""
        caller, turns = book(request, conversation_id)
        while chat and chat[-1]["role"] == "assistant":
            chat = chat[:-1]
        chosen = _settings(system_prompt, prio, max_tok, temp, top, effort, limit)
        async for update in again(chat, chosen, language, caller, turns):
            yield update

    async def ask_model(chat: list, similar: Served | None, system_prompt: str, prio: str, max_tok: float, temp: float,
                        top: float, effort: str, limit: float, language: str, conversation_id: str | None,
                        request: gr.Request) -> AsyncIterator[tuple]:
        """After a similar question's answer: reports it wrong, then the model answers instead."""
        caller, turns = book(request, conversation_id)
        while chat and chat[-1]["role"] == "assistant":
            chat = chat[:-1]
        chosen = _settings(system_prompt, prio, max_tok, temp, top, effort, limit)
        report_similar(page.services.pipeline, caller, who_is(caller, turns.owner), chat, chosen, similar)
        async for update in again(chat, chosen, language, caller, turns, exact=True):
            yield update

    async def edited(chat: list, system_prompt: str, prio: str, max_tok: float, temp: float, top: float,
                     effort: str, limit: float, language: str, conversation_id: str | None, edit: gr.EditData,
                     request: gr.Request) -> AsyncIterator[tuple]:
        """A past message of the user's, changed: the turns after it are replaced by a new answer."""
        caller, turns = book(request, conversation_id)
        index = edit.index if isinstance(edit.index, int) else edit.index[0]
        chosen = _settings(system_prompt, prio, max_tok, temp, top, effort, limit)
        if not 0 <= index < len(chat) or chat[index]["role"] != "user" or is_extra(chat[index]):
            yield chat, gr.update(visible=False), "", conversation_id, gr.skip(), gr.skip()
            return
        text = text_of(edit.value)
        chat = [*chat[:index], {"role": "user", "content": text}]
        await turns.cut(stored_count(chat[:index]), chosen)
        await turns.user_message(text, chosen)
        async for shown, toast, line, similar in stream_answer(page.services, caller, chat, chosen, code_of(language),
                                                               turns):
            yield (shown, toast, line, turns.conversation_id, served_as(similar, caller, turns),
                   gr.update(visible=similar is not None))

    async def undo(chat: list, conversation_id: str | None, data: gr.UndoData, request: gr.Request) -> tuple:
        """The last turn goes, and its message comes back into the box to be sent again."""
        _, turns = book(request, conversation_id)
        index = data.index if isinstance(data.index, int) else data.index[0]
        kept = chat[:index]
        await turns.cut(stored_count(kept), ChatSettings())
        return kept, text_of(data.value if data.value else chat[index]["content"]), ""

    chat_outputs = [chatbot, msg, page.toast, info, conversation, served, ask]
    again_outputs = [chatbot, page.toast, info, conversation, served, ask]
    events = [
        send.click(respond, [msg, chatbot, *inputs], chat_outputs, concurrency_limit=None),
        msg.submit(respond, [msg, chatbot, *inputs], chat_outputs, concurrency_limit=None),
        retry.click(redo, [chatbot, *inputs], again_outputs, concurrency_limit=None),
        chatbot.retry(redo, [chatbot, *inputs], again_outputs, concurrency_limit=None),
        chatbot.edit(edited, [chatbot, *inputs], again_outputs, concurrency_limit=None),
        ask.click(ask_model, [chatbot, served, *inputs], again_outputs, concurrency_limit=None),
    ]
    cancellable = cast("list[dict[str, Any]]", events)  # Gradio takes its own events; its annotation says dicts
    chatbot.undo(undo, [chatbot, conversation], [chatbot, msg, info], cancels=cancellable, concurrency_limit=None).then(
        ChatParts.no_similar, None, [served, ask], concurrency_limit=None, show_progress="hidden")
    parts = ChatParts(chatbot, conversation, info, msg, settings, events, [served, ask])
    side_events = wire_sidebar(page, sidebar, parts)
    for event in events:
        page.then_header(event).then(side_events.refresh, [sidebar.search, conversation], sidebar.listing,
                                     concurrency_limit=None, show_progress="hidden")
    stop.click(lambda: gr.update(visible=False), None, page.toast, cancels=cancellable, concurrency_limit=None)
    clear.click(lambda: ([], gr.update(visible=False), "", None, None, gr.update(visible=False)), None,
                [chatbot, page.toast, info, conversation, served, ask], cancels=cancellable, concurrency_limit=None)
    labels = {tab: "chat", msg: "message", send: "send", stop: "stop", retry: "retry", clear: "clear", ask: "ask_model",
              advanced: "advanced", system: "system_prompt", priority: "priority", max_tokens: "max_tokens",
              temperature: "temperature", top_p: "top_p", reasoning: "reasoning", timeout: "timeout",
              **operator.labels, **sidebar.labels}
    return labels, operator.group


def _settings(system: str, priority: str, max_tokens: float, temperature: float, top_p: float, reasoning: str,
              timeout: float) -> ChatSettings:
    return ChatSettings(priority, int(max_tokens), float(temperature), float(top_p), reasoning,
                        float(timeout or 300), system or "")
