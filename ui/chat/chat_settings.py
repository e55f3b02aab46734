"""The chat's settings as data: what the page's settings form submits becomes a ChatSettings, and
what a conversation saved becomes the form's values again. No Gradio here (ui.chat.settings_form
holds the fields)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

# the form's fields, in the order every answering event sends them
SETTING_NAMES = ("system_prompt", "priority", "max_tokens", "temperature", "top_p", "reasoning_effort", "timeout_s")


@dataclass(slots=True)
class ChatSettings:
    priority: str = "medium"
    max_tokens: int = 512
    temperature: float = 0.7
    top_p: float = 1.0
    reasoning_effort: str = "medium"
    timeout_s: float = 300.0
    system_prompt: str = ""


def submitted(values: Sequence[Any]) -> ChatSettings:
    """The form's values in SETTING_NAMES order, as Gradio hands them (numbers as floats, an empty
    timeout as nothing)."""
    system, priority, max_tokens, temperature, top_p, reasoning, timeout = values
    return ChatSettings(
        priority, int(max_tokens), float(temperature), float(top_p), reasoning, float(timeout or 300), system or ""
    )


def settings_dict(settings: ChatSettings) -> dict[str, Any]:
    """What a conversation saves of its settings."""
    return asdict(settings)


def settings_values(saved: dict[str, Any], default: ChatSettings) -> list[Any]:
    """The page's settings fields in SETTING_NAMES order, from a conversation's saved settings
    (a field it did not save keeps the page's default)."""
    base, out = asdict(default), []
    for name in SETTING_NAMES:
        value, wanted = saved.get(name, base[name]), base[name]
        if isinstance(wanted, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        out.append(value if type(value) is type(wanted) else wanted)
    return out
