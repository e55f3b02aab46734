"""What the sidebar fills in when it opens a conversation: the chat tab's parts, apart from
both so that neither module imports the other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr


@dataclass(slots=True)
class ChatParts:
    """What the sidebar fills in when it opens a conversation."""

    chatbot: gr.Chatbot
    conversation: gr.State
    info: gr.Markdown
    msg: gr.Textbox
    settings: list[Any]  # system, priority, max_tokens, temperature, top_p, reasoning, timeout
    events: list[Any]  # the answering events, which opening another conversation cancels
    similar: list[Any]  # the served similar answer's id and its "ask the model instead" button

    @staticmethod
    def no_similar() -> tuple[None, dict]:
        """Another conversation in the chat: the button is for an answer no longer there."""
        return None, gr.update(visible=False)
