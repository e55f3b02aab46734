"""The similar-question guards: each refuses its hard negative, and lets a paraphrase through."""

from __future__ import annotations

import pytest

from cache.similar_guards import features, jaccard, refusal, shingles, tokens


def refused(a: str, b: str) -> str | None:
    return refusal(features(a), features(b))


@pytest.mark.parametrize(
    "a, b",
    [
        ("How do I sort a list in Python?", "In Python, how do I sort a list?"),  # reordered clause
        ("How do I revrse a string in Python", "How do I reverse a string in Python"),  # typo
        ("What's the capital of France", "what is the capital of france?"),  # case, contraction, punctuation
        ("请解释一下什么是递归", "什么是递归？"),  # politeness, punctuation
        ("Please  explain   recursion.", "explain recursion"),  # whitespace, filler
    ],
)
def test_paraphrases_pass_every_guard(a: str, b: str):
    assert refused(a, b) is None


@pytest.mark.parametrize(
    "a, b, guard",
    [
        ("Convert 5 km to miles", "Convert 7 km to miles", "numbers"),
        ("我有三个苹果", "我有五个苹果", "numbers"),
        ("等待十二秒", "等待12秒", None),  # the same number, written two ways
        ("How far is 10 km", "How far is 10 miles", "numbers"),
        ("convert celsius to kelvin", "convert fahrenheit to kelvin", "units"),
        ("Why is the sky blue", "Why isn't the sky blue", "negations"),
        ("为什么天空是蓝色的", "为什么天空不是蓝色的", "negations"),
        ("Turn on dark mode", "Turn off dark mode", "polarity"),
        ("怎样打开蓝牙", "怎样关闭蓝牙", "polarity"),
        ("what does --max-cost do", "what does --max-heads do", "code"),
        ("explain the get_user function", "explain the get_users function", "code"),
        ("read /etc/hosts", "read /etc/passwd", "code"),
        ('translate "good morning"', 'translate "good night"', "code"),
        ("write a function in python", "write a function in rust", "named"),
        ("dog bites man", "man bites dog", "order"),
        ("从北京到上海怎么走", "从上海到北京怎么走", "order"),
        ("what is the capital of France", "what is the capital of Germany", "vocabulary"),
    ],
)
def test_each_guard_refuses_its_hard_negative(a: str, b: str, guard: str | None):
    assert refused(a, b) == guard
    assert refused(b, a) == guard


def test_chinese_is_tokenised_by_characters_and_english_by_words():
    assert tokens("排序 list") == ["排", "序", "list"]
    assert "排 序" in shingles("排序") and "sort list" in shingles("sort the list")
    assert jaccard(shingles("sort list"), shingles("sort list")) == 1.0
    assert jaccard(shingles("sort list"), shingles("merge dicts")) == 0.0
