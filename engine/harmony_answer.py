"""Where gpt-oss's free thinking ends and a constrained final answer begins: the engine stops the
thinking at one of `THINKING_ENDS` and the answer starts after `answer_header`. Pure."""

from __future__ import annotations

THINKING_ENDS = ("<|end|>", "<|channel|>final")  # an analysis message ends; or a final one begins
ANSWER_SUFFIX = ":answer"  # the answer's engine request id: the request's own, with this added


def answer_header(stop: str | int | None) -> str | None:
    """What goes between the thinking and the answer's body, by where the thinking stopped; None
    when it stopped for another reason (the client's own stop string, the end of the output)."""
    if stop == "<|end|>":
        return "<|end|><|start|>assistant<|channel|>final<|message|>"
    if stop == "<|channel|>final":
        return "<|channel|>final<|message|>"
    return None
