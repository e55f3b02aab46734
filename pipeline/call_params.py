"""What the pipeline reads of a chat call, whatever wire it came on. A Protocol, so the pipeline
imports no wire model: protocols/openai_chat's validated request provides it, and the Responses
API and the page build that request (a new wire does the same, or provides this itself). The
parameter names are the chat completion's, the vocabulary every engine here takes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from core.types import ChatMessage, Structured, ToolUse


class ChatTurn(Protocol):
    def to_chat(self) -> ChatMessage: ...


class ChatParams(Protocol):
    @property
    def model(self) -> str: ...

    @property
    def messages(self) -> Sequence[ChatTurn]: ...

    @property
    def temperature(self) -> float | None: ...

    @property
    def top_p(self) -> float | None: ...

    @property
    def top_k(self) -> int | None: ...

    @property
    def min_p(self) -> float | None: ...

    @property
    def seed(self) -> int | None: ...

    @property
    def presence_penalty(self) -> float | None: ...

    @property
    def frequency_penalty(self) -> float | None: ...

    @property
    def repetition_penalty(self) -> float | None: ...

    @property
    def min_tokens(self) -> int | None: ...

    @property
    def ignore_eos(self) -> bool | None: ...

    @property
    def stop_token_ids(self) -> list[int] | None: ...

    @property
    def logit_bias(self) -> dict[str, float] | None: ...

    @property
    def reasoning_effort(self) -> Literal["low", "medium", "high"] | None: ...

    @property
    def chat_template_kwargs(self) -> dict | None: ...

    @property
    def parallel_tool_calls(self) -> bool | None: ...

    @property
    def cache(self) -> bool | Literal["exact"] | None: ...

    @property
    def priority(self) -> str | int | None: ...

    @property
    def requested_max_tokens(self) -> int | None: ...

    @property
    def prompt_text(self) -> str | None:
        """A text completion's prompt, which the model continues as given (no chat template; the
        answer's text as written); None for a chat. `messages` then holds it as one user turn."""
        ...

    @property
    def max_tokens_param(self) -> str:
        """The parameter a too-long request is blamed on, by the name its wire gave it."""
        ...

    @property
    def stop_list(self) -> list[str]: ...

    @property
    def logprobs_count(self) -> int | None: ...

    @property
    def uses_tools(self) -> bool:
        """Tools offered, or tool calls and results in the conversation."""
        ...

    def tool_use(self) -> ToolUse | None:
        """The calls the engine is to read, or None."""
        ...

    def structured_output(self) -> Structured | None:
        """The constraint on the answer (JSON, or JSON under a schema), or None."""
        ...

    def cache_options(self) -> str:
        """Everything else set that can change the answer, canonically; "" for none."""
        ...
