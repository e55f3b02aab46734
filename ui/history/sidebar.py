"""The conversation sidebar: New chat, the list (newest first) with search over titles and text,
rename, delete with a confirmation, export (JSON or Markdown, this one or all) and import (a whole
file or nothing, refused in the reader's language).

Every handler names the owner from the request (ui.page) and the store answers only for that
owner, so a conversation id sent from another session, by the page or by a Gradio client, opens,
renames, exports and deletes nothing."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from ui.account.uploads import UploadRefused, read_upload
from ui.chat.chat_settings import ChatSettings, settings_values
from ui.chat.parts import ChatParts
from ui.history.export import file_stem, to_json, to_markdown
from ui.history.imports import ImportProblem, describe, import_file
from ui.history.view import chat_rows, choices, last_info
from ui.i18n import message
from ui.page import Labels, Page, code_of

FORMATS = ["JSON", "Markdown"]


@dataclass(slots=True)
class Sidebar:
    new: gr.Button
    search: gr.Textbox
    listing: gr.Radio
    title: gr.Textbox
    rename: gr.Button
    delete: gr.Button
    confirm_row: gr.Row
    confirm: gr.Button
    cancel: gr.Button
    export_format: gr.Radio
    export_one: gr.Button
    export_all: gr.Button
    export_file: gr.File
    upload: gr.UploadButton
    status: gr.Markdown
    labels: Labels


def build_sidebar(t: gr.I18n) -> Sidebar:
    new = gr.Button(t("new_chat"), variant="primary", elem_id="new-chat")
    search = gr.Textbox(label=t("search"), placeholder=t("search_hint"), elem_id="history-search")
    listing = gr.Radio(choices=[], value=None, label=t("conversations"), elem_id="history-list")
    title = gr.Textbox(label=t("title"), elem_id="history-title")
    with gr.Row():
        rename = gr.Button(t("rename"), size="sm", elem_id="rename")
        delete = gr.Button(t("delete"), size="sm", variant="stop", elem_id="delete")
    with gr.Row(visible=False, elem_id="delete-confirm") as confirm_row:
        confirm = gr.Button(t("confirm_delete"), size="sm", variant="stop", elem_id="delete-yes")
        cancel = gr.Button(t("cancel"), size="sm", elem_id="delete-no")
    export_format = gr.Radio(FORMATS, value="JSON", label=t("export_format"), elem_id="export-format")
    with gr.Row():
        export_one = gr.Button(t("export_one"), size="sm", elem_id="export-one")
        export_all = gr.Button(t("export_all"), size="sm", elem_id="export-all")
    export_file = gr.File(label=t("export_file"), visible=False, interactive=False, elem_id="export-file")
    upload = gr.UploadButton(t("import"), file_types=[".json"], type="filepath", size="sm",  # type: ignore[arg-type]
                             elem_id="import")  # Gradio takes an I18nData label; its annotation says str
    status = gr.Markdown(elem_id="history-status")
    labels = {new: "new_chat", search: "search", listing: "conversations", title: "title", rename: "rename",
              delete: "delete", confirm: "confirm_delete", cancel: "cancel", export_format: "export_format",
              export_one: "export_one", export_all: "export_all", export_file: "export_file", upload: "import"}
    return Sidebar(new, search, listing, title, rename, delete, confirm_row, confirm, cancel, export_format,
                   export_one, export_all, export_file, upload, status, labels)


def wire_sidebar(page: Page, side: Sidebar, chat: ChatParts) -> None:
    store = page.history

    def owner(request: gr.Request) -> str | None:
        return page.owner_of(request)[1] if store.available else None

    async def history_list(query: str, conversation_id: str | None, request: gr.Request) -> dict:
        who = owner(request)
        found = choices(await store.list(who, query or "")) if who is not None else []
        keep = conversation_id if any(value == conversation_id for _, value in found) else None
        return gr.update(choices=found, value=keep)

    async def history_open(conversation_id: str | None, language: str, request: gr.Request) -> tuple:
        who, code = owner(request), code_of(language)
        conversation = await store.get(who, conversation_id) if who is not None and conversation_id else None
        if conversation is None:
            gr.Warning(message(code, "not_found"))
            return ([], None, "", "", *[gr.update()] * len(chat.settings.inputs), gr.update(visible=False),
                    gr.update(visible=False))
        return (chat_rows(conversation, code), conversation.id, last_info(conversation, code), conversation.title,
                *settings_values(conversation.settings, ChatSettings()), gr.update(visible=False),
                gr.update(visible=False))

    async def history_title(conversation_id: str | None, request: gr.Request) -> str:
        """The title box follows the conversation in the chat, the one just started too."""
        who = owner(request)
        found = await store.get(who, conversation_id) if who is not None and conversation_id else None
        return found.title if found is not None else ""

    def history_new() -> tuple:
        return [], None, "", "", gr.update(visible=False), gr.update(value=None)

    async def history_rename(title: str, conversation_id: str | None, query: str, language: str,
                             request: gr.Request) -> tuple:
        who = owner(request)
        done = who is not None and conversation_id is not None and await store.rename(who, conversation_id, title)
        note = message(code_of(language), "renamed" if done else "not_found")
        return await history_list(query, conversation_id, request), note

    def history_ask(conversation_id: str | None) -> dict:
        return gr.update(visible=conversation_id is not None)

    async def history_delete(conversation_id: str | None, query: str, language: str, request: gr.Request) -> tuple:
        who = owner(request)
        done = who is not None and conversation_id is not None and await store.delete(who, conversation_id)
        note = message(code_of(language), "deleted" if done else "not_found")
        return ([], None, "", "", gr.update(visible=False), await history_list(query, None, request), note)

    async def exported(chosen: list, everything: bool, fmt: str, language: str) -> tuple:
        if not chosen:
            return gr.update(visible=False), message(code_of(language), "nothing_to_export")
        folder = Path(tempfile.mkdtemp(prefix="gptoss-history-"))
        markdown = fmt == "Markdown"
        path = folder / (file_stem(chosen, everything) + (".md" if markdown else ".json"))
        path.write_text(to_markdown(chosen) if markdown else to_json(chosen), encoding="utf-8")
        return gr.update(value=str(path), visible=True), message(code_of(language), "exported", n=len(chosen))

    async def history_export(fmt: str, conversation_id: str | None, language: str, request: gr.Request) -> tuple:
        who = owner(request)
        one = await store.get(who, conversation_id) if who is not None and conversation_id else None
        return await exported([one] if one is not None else [], False, fmt, language)

    async def history_export_all(fmt: str, language: str, request: gr.Request) -> tuple:
        who = owner(request)
        if who is None:
            return await exported([], True, fmt, language)
        full = [c for c in [await store.get(who, s.id) for s in await store.list(who)] if c is not None]
        return await exported(full, True, fmt, language)

    async def history_import(path: str | None, query: str, conversation_id: str | None, language: str,
                             request: gr.Request) -> tuple:
        who, code = owner(request), code_of(language)
        if who is None or not path:
            return gr.update(), message(code, "history_off")
        try:
            n = await import_file(store, who, _uploaded(path))
        except ImportProblem as problem:  # the whole file refused, the store as it was
            gr.Warning(describe(problem, code))
            return gr.update(), "⚠️ " + describe(problem, code)
        return await history_list(query, conversation_id, request), message(code, "imported", n=n)

    listed = [side.search, chat.conversation]
    chat.conversation.change(history_list, listed, side.listing, concurrency_limit=None, show_progress="hidden")
    chat.conversation.change(history_title, chat.conversation, side.title, concurrency_limit=None,
                             show_progress="hidden")
    side.search.change(history_list, listed, side.listing, concurrency_limit=None, show_progress="hidden")
    page.demo.load(history_list, listed, side.listing, concurrency_limit=None)
    for answered in chat.answered:
        answered.then(history_list, listed, side.listing, concurrency_limit=None, show_progress="hidden")
    opened = side.listing.input(history_open, [side.listing, page.lang],
                                [chat.chatbot, chat.conversation, chat.info, side.title, *chat.settings.inputs,
                                 side.confirm_row, side.export_file], cancels=chat.events, concurrency_limit=None)
    started = side.new.click(history_new, None, [chat.chatbot, chat.conversation, chat.info, side.title,
                                                 side.confirm_row, side.listing], cancels=chat.events,
                             concurrency_limit=None)
    for trigger in (side.rename.click, side.title.submit):
        trigger(history_rename, [side.title, chat.conversation, side.search, page.lang], [side.listing, side.status],
                concurrency_limit=None)
    side.delete.click(history_ask, chat.conversation, side.confirm_row, concurrency_limit=None)
    side.cancel.click(lambda: gr.update(visible=False), None, side.confirm_row, concurrency_limit=None)
    deleted = side.confirm.click(history_delete, [chat.conversation, side.search, page.lang],
                                 [chat.chatbot, chat.conversation, chat.info, side.title, side.confirm_row,
                                  side.listing, side.status], cancels=chat.events, concurrency_limit=None)
    for event in (opened, started, deleted):
        event.then(chat.no_similar, None, chat.similar, concurrency_limit=None, show_progress="hidden")
    side.export_one.click(history_export, [side.export_format, chat.conversation, page.lang],
                          [side.export_file, side.status], concurrency_limit=None)
    side.export_all.click(history_export_all, [side.export_format, page.lang], [side.export_file, side.status],
                          concurrency_limit=None)
    side.upload.upload(history_import, [side.upload, side.search, chat.conversation, page.lang],
                       [side.listing, side.status], concurrency_limit=None)


def _uploaded(path: str) -> bytes:
    try:
        return read_upload(path)
    except UploadRefused:
        raise ImportProblem("not_uploaded") from None
