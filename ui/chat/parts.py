"""What the conversation sidebar (ui.history) fills in and listens to: the chat's parts, without
its buttons, so that the sidebar knows the chat only through this."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from ui.chat.settings_form import SettingsForm


@dataclass(slots=True)
class ChatParts:
    chatbot: gr.Chatbot
    conversation: gr.State
    info: gr.Markdown
    msg: gr.Textbox
    settings: SettingsForm  # what opening a conversation fills back in
    events: list[Any]  # the answering events, which opening another conversation cancels
    answered: list[Any]  # each answering event once the header counts it: then the list follows
    similar: list[Any]  # the served similar answer's id and its "ask the model instead" button

    @staticmethod
    def no_similar() -> tuple[None, dict]:
        """Another conversation in the chat: the button is for an answer no longer there."""
        return None, gr.update(visible=False)
