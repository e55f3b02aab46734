"""The similar-question index: partitions, the threshold, guards, skips and its bound (pure)."""

from __future__ import annotations

import json

from cache.similar_index import SimilarIndex, split_canonical


def canonical(text: str, system: str = "be brief", **rest) -> str:
    request = {
        "v": 1,
        "namespace": "",
        "model": "sim",
        "max_tokens": 16,
        "temperature": 0.0,
        "top_p": None,
        "stop": [],
        "seed": None,
        "reasoning_effort": None,
        "messages": [["system", system], ["user", text]],
        **rest,
    }
    return json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def index(threshold: float = 0.5, max_entries: int = 100) -> SimilarIndex:
    return SimilarIndex(max_entries, threshold, lsh_threshold=0.3)


def test_a_paraphrase_matches_and_names_the_stored_entry():
    idx = index()
    assert idx.add("k1", canonical("How do I sort a list of numbers in Python?"))
    found = idx.match(canonical("in python, how do i sort a list of numbers"))
    assert found is not None and found.digest == "k1" and 0.5 <= found.similarity <= 1.0


def test_a_guard_refuses_and_is_counted():
    idx = index()
    idx.add("k1", canonical("Turn on dark mode in the settings page"))
    assert idx.match(canonical("Turn off dark mode in the settings page")) is None
    assert idx.refused["polarity"] == 1


def test_anything_but_the_last_user_text_must_be_identical():
    idx = index()
    idx.add("k1", canonical("How do I sort a list of numbers in Python?"))
    text = "How do I sort a list of numbers in Python"
    assert idx.match(canonical(text)) is not None
    for other in (
        canonical(text, system="be verbose"),
        canonical(text, namespace="key:other"),
        canonical(text, max_tokens=17),
        canonical(text, temperature=0.5),
        canonical(text, options='{"tools":[]}'),
        canonical(text, model="other"),
    ):
        assert idx.match(other) is None


def test_below_the_threshold_or_skipped_nothing_matches():
    idx = index(threshold=0.95)
    idx.add("k1", canonical("How do I sort a list of numbers in Python?"))
    assert idx.match(canonical("please, how do I sort a list of numbers in Python")) is not None  # fillers only
    assert idx.match(canonical("How do I sort a lsit of numbers in Python")) is None
    assert idx.match(canonical("How do I sort a list of numbers in Python"), skip=lambda d: d == "k1") is None


def test_the_bound_drops_the_oldest_and_remove_forgets():
    idx = index(max_entries=3)
    for i in range(5):
        idx.add(f"k{i}", canonical(f"question number {'abcde'[i]} about sorting lists"))
    assert len(idx) == 3 and "k0" not in idx and "k4" in idx
    idx.remove("k4")
    assert "k4" not in idx and idx.match(canonical("question number e about sorting lists")) is None
    idx.clear()
    assert len(idx) == 0


def test_only_a_conversation_ending_with_a_user_message_is_split():
    assert split_canonical(canonical("hi"))[1] == "hi"
    tool_turn = json.dumps({"messages": [["user", "x"], ["tool", "42", "{}"]]})
    assert split_canonical(tool_turn) is None and split_canonical("not json") is None
    assert not index().add("k", tool_turn)
