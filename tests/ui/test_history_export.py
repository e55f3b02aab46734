"""Export and import without a browser: our JSON round-trips whole, Markdown reads as a
transcript, ChatGPT's conversations.json comes in as its shown branch, anything else is refused
with a reason (ui.history.imports's checks, field by field, are tests/ui/test_history_import.py's); and
the rows the chat shows for a stored conversation."""

from __future__ import annotations

import json

import pytest

from conversations.records import Conversation, StoredMessage
from ui.chat.chat_settings import ChatSettings, settings_values
from ui.chat.views import stored_count
from ui.history.export import ImportProblem, file_stem, parse_import, to_json, to_markdown
from ui.history.view import chat_rows, last_info

DETAILS = {"caller": "alice", "class": "high", "wait_s": 1.25, "tokens": 12, "tokens_per_s": 30.5, "cached": True}


def conversation() -> Conversation:
    return Conversation(
        "c1",
        "Heaps, briefly",
        1_700_000_000.0,
        1_700_000_100.0,
        {"system_prompt": "be brief", "temperature": 0.2, "max_tokens": 64},
        [
            StoredMessage("user", "What is a heap?", created=1.0, id=1),
            StoredMessage(
                "assistant", "A tree kept in an array.", "They want the idea.", DETAILS, "done", created=2.0, id=2
            ),
            StoredMessage("user", "And a long one?", created=3.0, id=3),
            StoredMessage(
                "assistant", "It goes on and", "", {}, "stopped", "stopped before the end", created=4.0, id=4
            ),
        ],
    )


def test_our_json_round_trips():
    (back,) = parse_import(to_json([conversation()]).encode())
    original = conversation()
    assert back.title == original.title and back.settings == original.settings and back.created == original.created
    assert [(m.role, m.content, m.reasoning, m.details, m.outcome, m.reason, m.created) for m in back.messages] == [
        (m.role, m.content, m.reasoning, m.details, m.outcome, m.reason, m.created) for m in original.messages
    ]
    assert all(m.id is None for m in back.messages)  # ids are the file's own, made anew on import


def test_markdown_is_a_transcript():
    text = to_markdown([conversation()])
    assert text.startswith("# Heaps, briefly\n") and "**System prompt:** be brief" in text
    assert text.index("### You") < text.index("What is a heap?") < text.index("### Assistant")
    assert "<details><summary>Thinking</summary>\n\nThey want the idea." in text
    assert "_(stopped: stopped before the end)_" in text and "(done" not in text
    assert file_stem([conversation()], False) == "Heaps-briefly"
    assert file_stem([conversation()], True).startswith("conversations-")


def test_chatgpt_export_comes_in_as_the_branch_it_shows():
    export = [
        {
            "title": "Plums",
            "create_time": 1_690_000_000.5,
            "current_node": "c",
            "mapping": {
                "root": {"message": None, "parent": None, "children": ["a"]},
                "sys": {
                    "message": {"author": {"role": "system"}, "content": {"content_type": "text", "parts": ["hidden"]}},
                    "parent": "root",
                    "children": ["a"],
                },
                "a": {
                    "message": {
                        "author": {"role": "user"},
                        "create_time": 1_690_000_001.0,
                        "content": {"content_type": "text", "parts": ["How ripe?"]},
                    },
                    "parent": "sys",
                    "children": ["old", "c"],
                },
                "old": {
                    "message": {"author": {"role": "assistant"}, "content": {"content_type": "text", "parts": ["no"]}},
                    "parent": "a",
                    "children": [],
                },
                "c": {
                    "message": {
                        "author": {"role": "assistant"},
                        "content": {"content_type": "text", "parts": ["Soft", "."]},
                    },
                    "parent": "a",
                    "children": [],
                },
            },
        }
    ]
    (one,) = parse_import(json.dumps(export).encode())
    assert one.title == "Plums" and one.created == 1_690_000_000.5
    assert [(m.role, m.content, m.outcome) for m in one.messages] == [
        ("user", "How ripe?", ""),
        ("assistant", "Soft.", "done"),
    ]


@pytest.mark.parametrize(
    "data, code, values",
    [
        (b"not json", "not_json", {}),
        (b'{"conversations": []}', "unknown_format", {}),
        (
            json.dumps(
                {"format": "gpt-oss-webui.conversations", "conversations": [{"messages": [{"role": "tool"}]}]}
            ).encode(),
            "bad_field",
            {"conversation": 1, "field": "messages[0].role"},
        ),
        (
            json.dumps({"format": "gpt-oss-webui.conversations", "conversations": {}}).encode(),
            "bad_file_field",
            {"field": "conversations"},
        ),
    ],
)
def test_other_files_are_refused_with_a_reason(data, code, values):
    with pytest.raises(ImportProblem) as refused:
        parse_import(data)
    assert (refused.value.code, refused.value.values) == (code, values)


def test_chat_rows_bring_back_thinking_and_details():
    rows = chat_rows(conversation(), "en")
    assert [(r["role"], (r.get("metadata") or {}).get("title")) for r in rows] == [
        ("user", None),
        ("assistant", "Thinking"),
        ("assistant", None),
        ("assistant", "Details"),
        ("user", None),
        ("assistant", None),
        ("assistant", "Details"),
    ]
    assert rows[3]["content"] == "alice · class high · waited 1.2 s · 12 tokens · 30.5 tok/s · cache hit"
    assert rows[6]["content"] == "stopped: stopped before the end"
    assert stored_count(rows) == 4 and stored_count(rows[:4]) == 2  # titled rows are no stored messages
    assert last_info(conversation(), "zh") == "已停止: stopped before the end"
    assert chat_rows(conversation(), "zh")[1]["metadata"]["title"] == "思考过程"


def test_saved_settings_fill_the_fields_and_odd_values_keep_the_defaults():
    values = settings_values({"system_prompt": "be brief", "temperature": 1, "max_tokens": "lots"}, ChatSettings())
    assert values == ["be brief", "medium", 512, 1.0, 1.0, "medium", 300.0]
