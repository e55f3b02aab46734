"""What the chat shows of an answer: its details line, and the answer as it streams, with its
Thinking block; and which of the chat's rows are only shown, never stored as messages (a Thinking
block, a Details row)."""

from __future__ import annotations

from pipeline.caller import Caller
from pipeline.events import Finished
from ui.i18n import message


def is_extra(row: dict) -> bool:
    """A Thinking block or a Details row: shown, never stored as a message of its own."""
    return bool((row.get("metadata") or {}).get("title"))


def stored_count(chat: list[dict]) -> int:
    """How many stored messages the rows before a point stand for (where an edit cuts)."""
    return sum(1 for row in chat if not is_extra(row))


def answer_info(done: Finished, caller: Caller, priority: str, code: str) -> str:
    return details_text(answer_details(done, caller, priority), code)


def answer_details(done: Finished, caller: Caller, priority: str) -> dict:
    """What the line under an answer says, as data: the history keeps it with the answer."""
    details = {
        "caller": caller.name,
        "class": priority,
        "wait_s": done.queue_wait_s,
        "tokens": done.usage.completion_tokens,
        "tokens_per_s": done.tokens_per_s,
        "cached": done.cached,
        "finish_reason": done.finish_reason,
    }
    return details if done.similarity is None else {**details, "similarity": done.similarity}


def details_text(details: dict, code: str) -> str:
    """The line under an answer, for one given now or one kept in the history."""
    speed = "–" if details.get("tokens_per_s") is None else details["tokens_per_s"]
    if details.get("similarity") is not None:
        cache = message(code, "similar_hit", similarity=float(details["similarity"]))
    else:
        cache = message(code, "yes" if details.get("cached") else "no")
    return message(
        code,
        "info",
        caller=details.get("caller", ""),
        priority=details.get("class", ""),
        wait=float(details.get("wait_s") or 0.0),
        tokens=details.get("tokens", 0),
        speed=speed,
        cache=cache,
    )


class ShownAnswer:
    """The chat while an answer streams: the history, a "Thinking" block (a titled message, which
    the chatbot folds) while the model reasons, then the answer below it."""

    def __init__(self, history: list[dict], thinking_title: str) -> None:
        self.history = history
        self.title = thinking_title
        self.thinking: dict | None = None
        self.answer = {"role": "assistant", "content": ""}

    def think(self, text: str) -> None:
        if self.thinking is None:
            self.thinking = {"role": "assistant", "content": "", "metadata": {"title": self.title, "status": "pending"}}
        self.thinking["content"] += text

    def say(self, text: str) -> None:
        self.stop_thinking()
        self.answer["content"] += text

    def finish(self, text: str, reasoning: str) -> None:
        if reasoning:
            self.think("")
            if self.thinking is not None:
                self.thinking["content"] = reasoning
        self.stop_thinking()
        self.answer["content"] = text

    def stop_thinking(self) -> None:
        if self.thinking is not None:
            self.thinking["metadata"] = {"title": self.title, "status": "done"}

    def messages(self) -> list[dict]:
        """A new list of new dicts each time, so the page sees every change."""
        thinking = [{**self.thinking, "metadata": dict(self.thinking["metadata"])}] if self.thinking else []
        return [*self.history, *thinking, dict(self.answer)]
