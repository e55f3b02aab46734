"""One answer on the page, streamed into the chat and written to the history as it goes.

The user's message is committed before the answer is asked for; the answer's row is written when
it starts, brought up to date at most every CHECKPOINT_S while it streams, and written a last time
when it ends: done, stopped (the Stop button, or the page went away), refused or failed, with the
reason. A `kill -9` therefore loses at most the last CHECKPOINT_S of the answer being written."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import gradio as gr

from conversations.records import STREAMING, StoredMessage
from conversations.store import HistoryStore
from pipeline.caller import Caller
from pipeline.events import Finished, Queued, ReasoningDelta, Refused, Started, TextDelta, ToolCallPiece, render
from ui.chat.call import new_request_id, run_chat
from ui.chat.chat_settings import ChatSettings, settings_dict
from ui.chat.views import ShownAnswer, answer_details, answer_info
from ui.i18n import message
from ui.page import Update
from wiring import Services

CHECKPOINT_S = 1.0
log = logging.getLogger("gpt_oss_webui.history")


@dataclass(slots=True, frozen=True)
class AnswerStep:
    """The chat as the answer stands, the queue notice, the line under the chat, and the response id
    a similar question's answer went out as (what "ask the model instead" reports), else None."""

    chat: list[dict]
    toast: Update
    info: str | Update
    similar: str | None = None


@dataclass(slots=True)
class Book:
    """Where this page's turns are written: nowhere without a store or an owner."""

    store: HistoryStore
    owner: str | None
    conversation_id: str | None
    clock: Callable[[], float] = time.monotonic

    @property
    def on(self) -> bool:
        return self.writer is not None

    @property
    def writer(self) -> str | None:
        """The owner whose history this page writes, or None: no store, or nobody to write for."""
        return self.owner if self.store.available else None

    async def user_message(self, text: str, settings: ChatSettings) -> str | None:
        """Commits the user's message, starting a conversation titled by it where none is open
        (or where the open one has gone: deleted in another tab, or dropped by the bound)."""
        if (owner := self.writer) is None:
            return self.conversation_id
        saved = settings_dict(settings)
        if self.conversation_id is not None:
            if await self.store.add(owner, self.conversation_id, StoredMessage("user", text)) is not None:
                await self.store.save_settings(owner, self.conversation_id, saved)
                return self.conversation_id
        conversation_id = self.conversation_id = await self.store.create(owner, text, saved)
        await self.store.add(owner, conversation_id, StoredMessage("user", text))
        return conversation_id

    async def cut(self, keep: int, settings: ChatSettings) -> None:
        """Before a regenerated answer or an edited message: the later turns go."""
        if (owner := self.writer) is not None and self.conversation_id is not None:
            await self.store.truncate(owner, self.conversation_id, keep)
            await self.store.save_settings(owner, self.conversation_id, settings_dict(settings))


class _Recorder:
    def __init__(self, book: Book) -> None:
        self.book = book
        self.message_id: int | None = None
        self.last = 0.0

    async def start(self) -> None:
        if (owner := self.book.writer) is not None and self.book.conversation_id is not None:
            self.message_id = await self.book.store.add(
                owner, self.book.conversation_id, StoredMessage("assistant", "", outcome=STREAMING)
            )
            self.last = self.book.clock()

    async def progress(self, shown: ShownAnswer) -> None:
        if self.message_id is not None and self.book.clock() - self.last >= CHECKPOINT_S:
            self.last = self.book.clock()
            await self._write(shown, STREAMING)

    async def end(self, shown: ShownAnswer, outcome: str, reason: str = "", details: dict | None = None) -> None:
        if self.message_id is not None:
            message_id, self.message_id = self.message_id, None
            await self._write(shown, outcome, reason, details or {}, message_id)

    async def _write(
        self,
        shown: ShownAnswer,
        outcome: str,
        reason: str = "",
        details: dict | None = None,
        message_id: int | None = None,
    ) -> None:
        """A write that fails (the server closing the file under a last answer) is logged: the
        chat itself goes on."""
        owner, conversation_id = self.book.writer, self.book.conversation_id
        if owner is None or conversation_id is None:
            return  # nothing was started: `start` found nowhere to write
        thinking = shown.thinking["content"] if shown.thinking else ""
        stored = StoredMessage("assistant", shown.answer["content"], thinking, details or {}, outcome, reason)
        try:
            await self.book.store.update(owner, conversation_id, message_id or self.message_id or 0, stored)
        except (sqlite3.Error, RuntimeError, ValueError) as exc:
            log.warning("an answer could not be written to the history: %s", exc)


async def stream_answer(
    services: Services, caller: Caller, chat: list, settings: ChatSettings, code: str, book: Book, exact: bool = False
) -> AsyncIterator[AnswerStep]:
    """The steps of one answer, recorded in `book`. `exact`: no similar-question answer."""
    shown = ShownAnswer(chat, message(code, "thinking"))
    recorder = _Recorder(book)
    await recorder.start()
    yield AnswerStep(shown.messages(), _HIDDEN, "")
    request_id = new_request_id()
    page = _PageSteps(shown, recorder, caller, code, request_id)
    try:
        async for event in run_chat(services.pipeline, caller, chat, settings, request_id, exact):
            if (step := await render(event, page)) is not None:
                yield step
    finally:  # the Stop button cancels this generator; the page going away closes it
        if recorder.message_id is not None:
            shown.stop_thinking()
            await asyncio.shield(recorder.end(shown, "stopped", message(code, "stopped_reason")))


_HIDDEN = gr.update(visible=False)


class _PageSteps:
    """What the page shows of each event (an EventRenderer): the queue note while it waits, the
    thinking and the answer as they come (checkpointed to the history), then its line or the
    refusal as a toast."""

    def __init__(self, shown: ShownAnswer, recorder: _Recorder, caller: Caller, code: str, request_id: str) -> None:
        self.shown, self.recorder, self.caller, self.code, self.request_id = shown, recorder, caller, code, request_id
        self.priority = ""

    async def queued(self, event: Queued) -> AnswerStep:
        note = message(self.code, "queued", position=event.position, length=event.queue_length)
        if event.estimated_wait_s is not None:
            note += message(self.code, "eta", s=event.estimated_wait_s)
        return AnswerStep(self.shown.messages(), gr.update(value=note, visible=True), "")

    async def started(self, event: Started) -> None:
        self.priority = event.priority

    async def reasoning(self, event: ReasoningDelta) -> AnswerStep:
        self.shown.think(event.text)
        return await self._progress()

    async def text(self, event: TextDelta) -> AnswerStep:
        self.shown.say(event.text)
        return await self._progress()

    async def tool_call(self, event: ToolCallPiece) -> None:
        """Nothing to show: the page offers no tools, so no call comes."""

    async def finished(self, event: Finished) -> AnswerStep:
        self.shown.finish(event.text, event.reasoning)
        await self.recorder.end(self.shown, "done", details=answer_details(event, self.caller, self.priority))
        similar = self.request_id if event.similarity is not None else None
        return AnswerStep(
            self.shown.messages(), _HIDDEN, answer_info(event, self.caller, self.priority, self.code), similar
        )

    async def refused(self, event: Refused) -> AnswerStep:
        self.shown.stop_thinking()
        refusal = event.refusal
        await self.recorder.end(
            self.shown, "failed" if refusal.status >= 500 and refusal.status != 503 else "refused", refusal.message
        )
        if refusal.retry_after_s is not None:
            text = message(self.code, "busy", message=refusal.message, retry=refusal.retry_after_s)
        else:
            text = message(self.code, "error", message=refusal.message)
        gr.Warning(text)
        return AnswerStep(self.shown.messages(), _HIDDEN, f"⚠️ {text}")

    async def _progress(self) -> AnswerStep:
        await self.recorder.progress(self.shown)
        return AnswerStep(self.shown.messages(), _HIDDEN, gr.update())
