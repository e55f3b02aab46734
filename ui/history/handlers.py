"""What the conversation sidebar's events do: list and search, open, start anew, rename, delete,
export (JSON or Markdown, this one or all) and import (a whole file or nothing, refused in the
reader's language). The method names are the page's API names (/history_list, ...).

Every handler names the owner from the request (ui.page) and the store answers only for that
owner, so a conversation id sent from another session, by the page or by a Gradio client, opens,
renames, exports and deletes nothing."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import gradio as gr
from gradio.utils import get_upload_folder

from conversations.records import Conversation
from core.private_files import private_folder_in, write_private
from ui.account.uploads import UploadRefused, read_upload
from ui.chat.chat_settings import SETTING_NAMES, ChatSettings, settings_values
from ui.history.export import file_stem, to_json, to_markdown
from ui.history.imports import ImportProblem, describe, import_file
from ui.history.view import chat_rows, choices, last_info
from ui.i18n import message
from ui.page import Page, Update, code_of


@dataclass(slots=True, frozen=True)
class ChatShown:
    """What the chat shows of a conversation: its rows, its id, the line under the chat and its
    title in the sidebar; by default none, an empty chat."""

    rows: list[dict] = field(default_factory=list)
    conversation_id: str | None = None
    info: str = ""
    title: str = ""

    @classmethod
    def of(cls, conversation: Conversation, code: str) -> ChatShown:
        return cls(chat_rows(conversation, code), conversation.id, last_info(conversation, code), conversation.title)

    def values(self) -> tuple:
        return self.rows, self.conversation_id, self.info, self.title


class SidebarHandlers:
    def __init__(self, page: Page) -> None:
        self.page = page
        self.store = page.history

    def owner(self, request: gr.Request) -> str | None:
        return self.page.owner_of(request)[1] if self.store.available else None

    async def history_list(self, query: str, conversation_id: str | None, request: gr.Request) -> Update:
        who = self.owner(request)
        found = choices(await self.store.list(who, query or "")) if who is not None else []
        keep = conversation_id if any(value == conversation_id for _, value in found) else None
        return gr.update(choices=found, value=keep)

    async def history_open(self, conversation_id: str | None, language: str, request: gr.Request) -> tuple:
        """The chat, the settings form's values, the delete confirmation and the exported file hidden."""
        who, code = self.owner(request), code_of(language)
        conversation = await self.store.get(who, conversation_id) if who is not None and conversation_id else None
        if conversation is None:
            gr.Warning(message(code, "not_found"))
            shown, settings = ChatShown(), [gr.update()] * len(SETTING_NAMES)
        else:
            shown, settings = ChatShown.of(conversation, code), settings_values(conversation.settings, ChatSettings())
        return *shown.values(), *settings, gr.update(visible=False), gr.update(visible=False)

    async def history_title(self, conversation_id: str | None, request: gr.Request) -> str:
        """The title box follows the conversation in the chat, the one just started too."""
        who = self.owner(request)
        found = await self.store.get(who, conversation_id) if who is not None and conversation_id else None
        return found.title if found is not None else ""

    def history_new(self) -> tuple:
        """An empty chat; the delete confirmation hidden, nothing chosen in the list."""
        return *ChatShown().values(), gr.update(visible=False), gr.update(value=None)

    async def history_rename(
        self, title: str, conversation_id: str | None, query: str, language: str, request: gr.Request
    ) -> tuple[Update, str]:
        who = self.owner(request)
        done = who is not None and conversation_id is not None and await self.store.rename(who, conversation_id, title)
        note = message(code_of(language), "renamed" if done else "not_found")
        return await self.history_list(query, conversation_id, request), note

    def history_ask(self, conversation_id: str | None) -> Update:
        return gr.update(visible=conversation_id is not None)

    async def history_delete(
        self, conversation_id: str | None, query: str, language: str, request: gr.Request
    ) -> tuple:
        """An empty chat, the confirmation hidden, the list without it, and what was done."""
        who = self.owner(request)
        done = who is not None and conversation_id is not None and await self.store.delete(who, conversation_id)
        note = message(code_of(language), "deleted" if done else "not_found")
        return *ChatShown().values(), gr.update(visible=False), await self.history_list(query, None, request), note

    async def history_export(
        self, fmt: str, conversation_id: str | None, language: str, request: gr.Request
    ) -> tuple[Update, str]:
        who = self.owner(request)
        one = await self.store.get(who, conversation_id) if who is not None and conversation_id else None
        return await asyncio.to_thread(exported, [one] if one is not None else [], False, fmt, language)

    async def history_export_all(self, fmt: str, language: str, request: gr.Request) -> tuple[Update, str]:
        who = self.owner(request)
        if who is None:
            return exported([], True, fmt, language)
        full = [c for c in [await self.store.get(who, s.id) for s in await self.store.list(who)] if c is not None]
        return await asyncio.to_thread(exported, full, True, fmt, language)  # a whole history: off the event loop

    async def history_import(
        self, path: str | None, query: str, conversation_id: str | None, language: str, request: gr.Request
    ) -> tuple[Update, str]:
        who, code = self.owner(request), code_of(language)
        if who is None or not path:
            return gr.update(), message(code, "history_off")
        try:
            n = await import_file(self.store, who, await asyncio.to_thread(_uploaded, path))
        except ImportProblem as problem:  # the whole file refused, the store as it was
            gr.Warning(describe(problem, code))
            return gr.update(), "⚠️ " + describe(problem, code)
        return await self.history_list(query, conversation_id, request), message(code, "imported", n=n)


def exported(chosen: list[Conversation], everything: bool, fmt: str, language: str) -> tuple[Update, str]:
    """The file to download (JSON or Markdown) and what was done. It is written 0600 in a 0700 folder
    inside Gradio's own cache, which Gradio then serves as it is instead of copying it with its own modes."""
    if not chosen:
        return gr.update(visible=False), message(code_of(language), "nothing_to_export")
    folder = private_folder_in(get_upload_folder(), "gptoss-history-")
    markdown = fmt == "Markdown"
    path = folder / (file_stem(chosen, everything) + (".md" if markdown else ".json"))
    write_private(path, to_markdown(chosen) if markdown else to_json(chosen))
    return gr.update(value=str(path), visible=True), message(code_of(language), "exported", n=len(chosen))


def _uploaded(path: str) -> bytes:
    try:
        return read_upload(path)
    except UploadRefused:
        raise ImportProblem("not_uploaded") from None
