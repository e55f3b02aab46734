"""Where a constrained gpt-oss answer starts, by where the free thinking stopped."""

from engine.harmony import HarmonyParser
from engine.harmony_answer import THINKING_ENDS, answer_header


def test_each_thinking_end_leads_into_the_final_channel():
    for stop, before in zip(
        THINKING_ENDS,
        ("<|channel|>analysis<|message|>think", "<|channel|>analysis<|message|>think<|end|><|start|>assistant"),
    ):
        parser = HarmonyParser()
        parsed = parser.feed(before + answer_header(stop) + '{"a": 1}') + parser.finish()
        assert (parsed.reasoning, parsed.answer) == ("think", '{"a": 1}'), stop


def test_other_stops_end_the_answer():
    assert answer_header(None) is None and answer_header("</s>") is None and answer_header(200012) is None
