"""The chat's settings on the page (in Advanced settings): seven fields listed once, in the order
every answering event sends them (ui.chat.chat_settings.SETTING_NAMES), so that the handlers read
them with one call (`submitted`) and an opened conversation fills them back in the same order."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from ui.page import Labels


@dataclass(slots=True)
class SettingsForm:
    system: gr.Textbox
    priority: gr.Radio
    max_tokens: gr.Slider
    temperature: gr.Slider
    top_p: gr.Slider
    reasoning: gr.Radio
    timeout: gr.Number

    @property
    def inputs(self) -> list[gr.components.Component]:
        """The fields in SETTING_NAMES order: what an event sends, and what opening a conversation fills."""
        return [self.system, self.priority, self.max_tokens, self.temperature, self.top_p, self.reasoning, self.timeout]

    @property
    def labels(self) -> Labels:
        return {
            self.system: "system_prompt",
            self.priority: "priority",
            self.max_tokens: "max_tokens",
            self.temperature: "temperature",
            self.top_p: "top_p",
            self.reasoning: "reasoning",
            self.timeout: "timeout",
        }


def build_settings_form(t: gr.I18n, max_model_len: int) -> SettingsForm:
    """The fields with the page's defaults (ui.chat.chat_settings.ChatSettings)."""
    return SettingsForm(
        gr.Textbox(label=t("system_prompt"), lines=2, elem_id="system-prompt"),
        gr.Radio(["high", "medium", "low"], value="medium", label=t("priority"), elem_id="priority"),
        gr.Slider(1, max_model_len, value=min(512, max_model_len), step=1, label=t("max_tokens")),
        gr.Slider(0, 2, value=0.7, step=0.05, label=t("temperature")),
        gr.Slider(0.05, 1, value=1.0, step=0.05, label=t("top_p")),
        gr.Radio(["low", "medium", "high"], value="medium", label=t("reasoning")),
        gr.Number(300, minimum=1, label=t("timeout")),
    )
