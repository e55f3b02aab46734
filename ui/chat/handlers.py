"""What the chat's events do: send, regenerate (our Retry button and the chatbot's own retry icon),
edit a past message and answer again from there, "ask the model instead" after a similar
question's answer from the cache, and undo the last turn. Each acts as the signed-in caller and
writes the conversation to that owner's history as it goes (ui.chat.answer).

The method names are the page's API names (/respond, /redo, ...). Every answering event sends the
settings form's values, the language and the conversation last (ChatColumn.asked); a handler takes
them as `*asked` and reads them once (Asked.read). Gradio hands the request only to a parameter
it can place, so `request` comes first."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import gradio as gr

from pipeline.caller import Caller
from ui.chat.answer import AnswerStep, Book, stream_answer
from ui.chat.call import Served, report_similar, text_of, who_is
from ui.chat.chat_settings import ChatSettings, submitted
from ui.chat.views import is_extra, stored_count
from ui.page import Page, Update, code_of


@dataclass(slots=True, frozen=True)
class Asked:
    """What every answering event sends after its own inputs: the settings form's values, the
    page's language and the conversation open in the chat."""

    settings: ChatSettings
    code: str
    conversation_id: str | None

    @classmethod
    def read(cls, values: Sequence[Any]) -> Asked:
        *form, language, conversation_id = values
        return cls(submitted(form), code_of(language), conversation_id)


@dataclass(slots=True, frozen=True)
class Answering:
    """One update of the chat while an answer comes: the chat, the queue notice, the line under it,
    the conversation it is written to, the similar answer served and its "ask the model instead"."""

    chat: list[dict]
    toast: Update
    info: str | Update
    conversation_id: str | None
    served: Served | None | Update
    ask: Update

    @classmethod
    def unchanged(cls, chat: list[dict], conversation_id: str | None) -> Answering:
        """Nothing to answer: the chat as it was, the notice and the line cleared."""
        return cls(chat, gr.update(visible=False), "", conversation_id, gr.skip(), gr.skip())

    def outputs(self) -> tuple:
        """For the events that answer again: chat, toast, info, conversation, served, ask."""
        return self.chat, self.toast, self.info, self.conversation_id, self.served, self.ask

    def with_message(self, text: str) -> tuple:
        """For the events that send: the message box (`text`) after the chat."""
        return self.chat, text, self.toast, self.info, self.conversation_id, self.served, self.ask


class ChatHandlers:
    def __init__(self, page: Page) -> None:
        self.page = page

    async def respond(self, request: gr.Request, text: str, chat: list, *asked: Any) -> AsyncIterator[tuple]:
        """A new message: the user's turn, committed, then the answer."""
        ask = Asked.read(asked)
        caller, turns = self._book(request, ask.conversation_id)
        if not text.strip():
            yield Answering.unchanged(chat, ask.conversation_id).with_message(text)
            return
        chat = [*chat, {"role": "user", "content": text}]
        await turns.user_message(text, ask.settings)
        async for update in self._answer(chat, ask, caller, turns):
            yield update.with_message("")

    async def redo(self, request: gr.Request, chat: list, *asked: Any) -> AsyncIterator[tuple]:
        """Regenerates the last answer: it, and its Thinking and Details, go."""
        ask = Asked.read(asked)
        caller, turns = self._book(request, ask.conversation_id)
        async for update in self._again(without_answer(chat), ask, caller, turns):
            yield update

    async def ask_model(
        self, request: gr.Request, chat: list, similar: Served | None, *asked: Any
    ) -> AsyncIterator[tuple]:
        """After a similar question's answer: reports it wrong, then the model answers instead."""
        ask = Asked.read(asked)
        caller, turns = self._book(request, ask.conversation_id)
        chat = without_answer(chat)
        report_similar(self.page.services.pipeline, caller, who_is(caller, turns.owner), chat, ask.settings, similar)
        async for update in self._again(chat, ask, caller, turns, exact=True):
            yield update

    async def edited(self, request: gr.Request, edit: gr.EditData, chat: list, *asked: Any) -> AsyncIterator[tuple]:
        """A past message of the user's, changed: the turns after it are replaced by a new answer."""
        ask = Asked.read(asked)
        caller, turns = self._book(request, ask.conversation_id)
        index = edit.index if isinstance(edit.index, int) else edit.index[0]
        if not 0 <= index < len(chat) or chat[index]["role"] != "user" or is_extra(chat[index]):
            yield Answering.unchanged(chat, ask.conversation_id).outputs()
            return
        text = text_of(edit.value)
        chat = [*chat[:index], {"role": "user", "content": text}]
        await turns.cut(stored_count(chat[:index]), ask.settings)
        await turns.user_message(text, ask.settings)
        async for update in self._answer(chat, ask, caller, turns):
            yield update.outputs()

    async def undo(
        self, chat: list, conversation_id: str | None, data: gr.UndoData, request: gr.Request
    ) -> tuple[list, str, str]:
        """The last turn goes, and its message comes back into the box to be sent again."""
        _, turns = self._book(request, conversation_id)
        index = data.index if isinstance(data.index, int) else data.index[0]
        kept = chat[:index]
        await turns.cut(stored_count(kept), ChatSettings())
        return kept, text_of(data.value if data.value else chat[index]["content"]), ""

    def _book(self, request: gr.Request, conversation_id: str | None) -> tuple[Caller, Book]:
        caller, owner = self.page.owner_of(request)
        return caller, Book(self.page.history, owner, conversation_id)

    async def _again(
        self, chat: list, ask: Asked, caller: Caller, turns: Book, exact: bool = False
    ) -> AsyncIterator[tuple]:
        """A new answer to the chat as it stands, the later turns cut from the history first."""
        if not chat:
            yield Answering.unchanged(chat, turns.conversation_id).outputs()
            return
        await turns.cut(stored_count(chat), ask.settings)
        async for update in self._answer(chat, ask, caller, turns, exact):
            yield update.outputs()

    async def _answer(
        self, chat: list, ask: Asked, caller: Caller, turns: Book, exact: bool = False
    ) -> AsyncIterator[Answering]:
        async for step in stream_answer(self.page.services, caller, chat, ask.settings, ask.code, turns, exact):
            yield self._shown(step, caller, turns)

    @staticmethod
    def _shown(step: AnswerStep, caller: Caller, turns: Book) -> Answering:
        served = None if step.similar is None else Served(step.similar, who_is(caller, turns.owner))
        return Answering(
            step.chat, step.toast, step.info, turns.conversation_id, served, gr.update(visible=step.similar is not None)
        )


def without_answer(chat: list) -> list:
    """The chat up to its last answer's question: the answer, its Thinking and Details, go."""
    while chat and chat[-1]["role"] == "assistant":
        chat = chat[:-1]
    return chat
