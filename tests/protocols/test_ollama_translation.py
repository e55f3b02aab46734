"""Ollama's request as the chat request, and its answers' tool arguments, without a server."""

from __future__ import annotations

import json

import pytest

from core.types import ChatMessage, ToolCall
from engine.chat_template import message_dict
from protocols.ollama.render import arguments
from protocols.ollama.request import ChatRequest, Message
from protocols.ollama.to_chat import Untranslatable, chat_fields, chat_messages


def test_tool_results_pair_with_their_calls_by_id_name_or_order() -> None:
    calls = [{"function": {"name": name, "arguments": {"n": i}}} for i, name in enumerate(["a", "b", "a", "c"])]
    turns = [
        Message(role="user", content="go"),
        Message.model_validate({"role": "assistant", "tool_calls": calls}),
        Message(role="tool", content="c's", tool_name="c"),
        Message(role="tool", content="a's", tool_name="a"),
        Message(role="tool", content="next", tool_call_id="call_1_1"),
        Message(role="tool", content="the rest"),
    ]
    paired = [m.get("tool_call_id") for m in chat_messages(turns)[2:]]
    assert paired == ["call_1_3", "call_1_0", "call_1_1", "call_1_2"]


def test_a_turn_of_ten_thousand_calls_answered_in_reverse_pairs_each_once() -> None:
    """Found by name at once, not by scanning (the scan held the event loop 17.7 s)."""
    n = 10_000
    calls = [{"function": {"name": f"f{i}", "arguments": {}}} for i in range(n)]
    turns = [Message.model_validate({"role": "assistant", "tool_calls": calls})]
    turns += [Message(role="tool", content="ok", tool_name=f"f{i}") for i in reversed(range(n))]
    paired = [m["tool_call_id"] for m in chat_messages(turns)[1:]]
    assert paired == [f"call_0_{i}" for i in reversed(range(n))]


def test_a_tool_result_answering_nothing_is_refused() -> None:
    turns = [Message(role="assistant", tool_calls=None, content="hi"), Message(role="tool", content="x")]
    with pytest.raises(Untranslatable) as err:
        chat_messages(turns)
    assert err.value.param == "messages.1"


@pytest.mark.parametrize(("seed", "sent"), [(7, 7), (0, 0), (-1, None)])
def test_a_negative_seed_is_ollamas_random_one(seed: int, sent: int | None) -> None:
    body = ChatRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "x"}], "options": {"seed": seed}}
    )
    assert chat_fields(body, "m").get("seed") == sent


def test_arguments_nested_past_the_parser_come_back_whole() -> None:
    deep = '{"a": ' + "[" * 5000 + "]" * 5000 + "}"
    assert arguments(deep) == {"input": deep}
    assert arguments(json.dumps({"city": "Oslo"})) == {"city": "Oslo"} and arguments("[1]") == {"input": [1]}


def test_a_past_turns_arguments_nested_past_the_parser_reach_the_template_as_text() -> None:
    """Chat's `/v1` path: an earlier turn's argument text 100,000 deep was a 500 (RecursionError)."""
    deep = "[" * 100_000
    turn = ChatMessage("assistant", "", (ToolCall("c1", "f", deep),))
    assert message_dict(turn)["tool_calls"][0]["function"]["arguments"] == deep
