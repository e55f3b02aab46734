"""Per-caller limits as a pure policy with a fake clock: each refuses at the right count, with
OpenAI's headers, and recovers when its window has passed."""

from __future__ import annotations

import pytest

from pipeline.caller import Caller
from pipeline.rate_limit import RateLimiter, duration
from pipeline.refusal import Refusal
from settings.schema import Limits

MIDNIGHT = 20_000 * 86_400.0


class Clock:
    def __init__(self, now: float = MIDNIGHT + 3600) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def caller(**limits) -> Caller:
    return Caller("alice", limits=Limits(**limits))


def test_rpm_refuses_the_request_past_the_limit_and_recovers_after_a_minute():
    clock, alice = Clock(), caller(rpm=3)
    limiter = RateLimiter(clock)
    for remaining in (2, 1, 0):
        limiter.admit_request(alice)
        clock.now += 1
        assert limiter.headers(alice)["x-ratelimit-remaining-requests"] == str(remaining)
    with pytest.raises(Refusal) as refused:
        limiter.admit_request(alice)
    error = refused.value
    assert (error.status, error.code) == (429, "rate_limit_exceeded") and "3 requests per minute" in error.message
    assert error.retry_after_s == 57  # the first request leaves the window 60 s after it came
    assert error.headers["x-ratelimit-limit-requests"] == "3" and error.headers["x-ratelimit-remaining-requests"] == "0"
    assert error.headers["x-ratelimit-reset-requests"] == "59s"  # the window is empty 60 s after the last
    clock.now += 57
    limiter.admit_request(alice)  # one has left the window


def test_token_counts_have_a_window_of_their_own_at_the_same_rpm():
    """A gateway that counts each prompt before sending it keeps its whole `rpm` for the requests."""
    clock, alice = Clock(), caller(rpm=2)
    limiter = RateLimiter(clock)
    limiter.admit_count(alice)
    limiter.admit_count(alice)
    with pytest.raises(Refusal) as refused:
        limiter.admit_count(alice)
    assert refused.value.status == 429 and "2 token counts per minute" in refused.value.message
    assert refused.value.retry_after_s == 60 and not refused.value.headers  # no requests' figures
    limiter.admit_request(alice)
    limiter.admit_request(alice)
    with pytest.raises(Refusal):
        limiter.admit_request(alice)
    clock.now += 60
    limiter.admit_count(alice)


def test_tpm_counts_prompts_at_the_door_and_completions_when_they_end():
    clock, alice = Clock(), caller(tpm=100)
    limiter = RateLimiter(clock)
    limiter.check_tokens(alice, 30)
    limiter.spend(alice, 30)
    limiter.spend(alice, 50)  # the completion
    assert limiter.headers(alice)["x-ratelimit-remaining-tokens"] == "20"
    limiter.check_tokens(alice, 20)
    with pytest.raises(Refusal) as refused:
        limiter.check_tokens(alice, 21)
    assert refused.value.code == "rate_limit_exceeded" and "100 tokens per minute" in refused.value.message
    clock.now += 60
    limiter.check_tokens(alice, 100)
    with pytest.raises(Refusal, match="request too large"):
        limiter.check_tokens(alice, 101)


def test_the_daily_quota_renews_at_midnight_utc():
    clock, alice = Clock(MIDNIGHT + 86_400 - 100), caller(daily_tokens=1000)
    limiter = RateLimiter(clock)
    limiter.spend(alice, 990)
    limiter.check_tokens(alice, 10)
    with pytest.raises(Refusal) as refused:
        limiter.check_tokens(alice, 11)
    assert refused.value.code == "insufficient_quota" and refused.value.retry_after_s == 100
    assert limiter.day_tokens("alice") == 990
    clock.now += 100
    assert limiter.day_tokens("alice") == 0
    limiter.check_tokens(alice, 1000)


def test_no_limits_no_headers_and_no_refusals():
    limiter, free = RateLimiter(Clock()), caller()
    for _ in range(1000):
        limiter.admit_request(free)
        limiter.check_tokens(free, 10_000)
    assert limiter.headers(free) == {}


def test_callers_are_counted_apart():
    limiter = RateLimiter(Clock())
    alice, bob = caller(rpm=1), Caller("bob", limits=Limits(rpm=1))
    limiter.admit_request(alice)
    limiter.admit_request(bob)
    with pytest.raises(Refusal):
        limiter.admit_request(alice)


@pytest.mark.parametrize("seconds, text", [(0.02, "20ms"), (0, "0ms"), (6, "6s"), (59.2, "1m0s"), (61, "1m1s")])
def test_reset_durations_read_as_openai_writes_them(seconds, text):
    assert duration(seconds) == text
