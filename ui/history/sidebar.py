"""The conversation sidebar: New chat, the list (newest first) with search over titles and text,
rename, delete with a confirmation, export (JSON or Markdown, this one or all) and import (a whole
file or nothing, refused in the reader's language). Laid out by `build_sidebar`, its events wired
by `wire_sidebar` to the handlers (ui.history.handlers) and to the chat's parts (ui.chat.parts)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from ui.chat.parts import ChatParts
from ui.history.handlers import SidebarHandlers
from ui.page import Labels, Page

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
    upload = gr.UploadButton(
        t("import"),  # type: ignore[arg-type]
        file_types=[".json"],
        type="filepath",
        size="sm",
        elem_id="import",
    )  # Gradio takes an I18nData label; its annotation says str
    status = gr.Markdown(elem_id="history-status")
    labels = {
        new: "new_chat",
        search: "search",
        listing: "conversations",
        title: "title",
        rename: "rename",
        delete: "delete",
        confirm: "confirm_delete",
        cancel: "cancel",
        export_format: "export_format",
        export_one: "export_one",
        export_all: "export_all",
        export_file: "export_file",
        upload: "import",
    }
    return Sidebar(
        new,
        search,
        listing,
        title,
        rename,
        delete,
        confirm_row,
        confirm,
        cancel,
        export_format,
        export_one,
        export_all,
        export_file,
        upload,
        status,
        labels,
    )


def wire_sidebar(page: Page, side: Sidebar, chat: ChatParts) -> None:
    handlers = SidebarHandlers(page)
    _wire_listing(handlers, page, side, chat)
    for event in _wire_switching(handlers, page, side, chat):
        event.then(chat.no_similar, None, chat.similar, concurrency_limit=None, show_progress="hidden")
    for trigger in (side.rename.click, side.title.submit):
        trigger(
            handlers.history_rename,
            [side.title, chat.conversation, side.search, page.lang],
            [side.listing, side.status],
            concurrency_limit=None,
        )
    _wire_files(handlers, page, side, chat)


def _wire_listing(handlers: SidebarHandlers, page: Page, side: Sidebar, chat: ChatParts) -> None:
    """The list follows the search, the conversation in the chat, the page's load and every answer;
    the title box follows the conversation."""
    listed = [side.search, chat.conversation]
    chat.conversation.change(
        handlers.history_list, listed, side.listing, concurrency_limit=None, show_progress="hidden"
    )
    chat.conversation.change(
        handlers.history_title, chat.conversation, side.title, concurrency_limit=None, show_progress="hidden"
    )
    side.search.change(handlers.history_list, listed, side.listing, concurrency_limit=None, show_progress="hidden")
    page.demo.load(handlers.history_list, listed, side.listing, concurrency_limit=None)
    for answered in chat.answered:
        answered.then(handlers.history_list, listed, side.listing, concurrency_limit=None, show_progress="hidden")


def _wire_switching(handlers: SidebarHandlers, page: Page, side: Sidebar, chat: ChatParts) -> list[Any]:
    """Open, New chat and delete (asked, then confirmed): each puts another conversation, or none,
    in the chat and stops the answer coming there."""
    shown = [chat.chatbot, chat.conversation, chat.info, side.title]  # ui.history.handlers.ChatShown
    opened = side.listing.input(
        handlers.history_open,
        [side.listing, page.lang],
        [*shown, *chat.settings.inputs, side.confirm_row, side.export_file],
        cancels=chat.events,
        concurrency_limit=None,
    )
    started = side.new.click(
        handlers.history_new,
        None,
        [*shown, side.confirm_row, side.listing],
        cancels=chat.events,
        concurrency_limit=None,
    )
    side.delete.click(handlers.history_ask, chat.conversation, side.confirm_row, concurrency_limit=None)
    side.cancel.click(lambda: gr.update(visible=False), None, side.confirm_row, concurrency_limit=None)
    deleted = side.confirm.click(
        handlers.history_delete,
        [chat.conversation, side.search, page.lang],
        [*shown, side.confirm_row, side.listing, side.status],
        cancels=chat.events,
        concurrency_limit=None,
    )
    return [opened, started, deleted]


def _wire_files(handlers: SidebarHandlers, page: Page, side: Sidebar, chat: ChatParts) -> None:
    side.export_one.click(
        handlers.history_export,
        [side.export_format, chat.conversation, page.lang],
        [side.export_file, side.status],
        concurrency_limit=None,
    )
    side.export_all.click(
        handlers.history_export_all,
        [side.export_format, page.lang],
        [side.export_file, side.status],
        concurrency_limit=None,
    )
    side.upload.upload(
        handlers.history_import,
        [side.upload, side.search, chat.conversation, page.lang],
        [side.listing, side.status],
        concurrency_limit=None,
    )
