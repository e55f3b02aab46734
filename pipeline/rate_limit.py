"""Per-caller rate limits: requests and tokens per minute over a sliding window, and a daily token
quota. A breach is a 429 naming the limit; every answer carries the `x-ratelimit-*` headers the
OpenAI API sends, so clients that pace themselves by them work here unchanged. Pure: the clock is
injected and nothing here does I/O."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pipeline.caller import Caller
from pipeline.refusal import Refusal

WINDOW_S = 60.0
DAY_S = 86_400.0


class SharedTally(Protocol):
    """Counts kept beyond this process (what the wiring hands in, e.g. one on Redis). `kind` is
    "requests", "counts" or "tokens" (per `WINDOW_S`) or "day" (per UTC day)."""

    def add(self, name: str, kind: str, amount: int) -> None: ...

    def used(self, name: str, kind: str, local: int) -> int:
        """Everyone's count; `local`, this process's, while nothing better is known."""


class SlidingWindow:
    """Amounts recorded over the last minute."""

    def __init__(self) -> None:
        self._entries: deque[tuple[float, int]] = deque()
        self.total = 0

    def used(self, now: float) -> int:
        while self._entries and self._entries[0][0] <= now - WINDOW_S:
            self.total -= self._entries.popleft()[1]
        return self.total

    def add(self, now: float, amount: int) -> None:
        if amount > 0:
            self._entries.append((now, amount))
            self.total += amount

    def wait_for_room(self, now: float, amount: int, limit: int) -> float:
        """Seconds until `amount` more fits under `limit` as older entries leave the window."""
        excess = self.used(now) + amount - limit
        if excess <= 0:
            return 0.0
        for at, size in self._entries:
            excess -= size
            if excess <= 0:
                return at + WINDOW_S - now
        return WINDOW_S

    def reset_s(self, now: float) -> float:
        """Seconds until the window is empty again: OpenAI's `x-ratelimit-reset-*`."""
        return max(0.0, self._entries[-1][0] + WINDOW_S - now) if self.used(now) else 0.0


@dataclass(slots=True)
class _Account:
    requests: SlidingWindow = field(default_factory=SlidingWindow)
    counts: SlidingWindow = field(default_factory=SlidingWindow)  # token-counting calls
    tokens: SlidingWindow = field(default_factory=SlidingWindow)
    day: int = -1
    day_tokens: int = 0


class RateLimiter:
    """`shared`: counts kept beyond this process, as the wiring chooses; without it, this
    process's own."""

    def __init__(self, clock: Callable[[], float] = time.time, shared: SharedTally | None = None) -> None:
        self.clock = clock
        self.shared = shared
        self._accounts: dict[str, _Account] = {}

    def admit_request(self, caller: Caller) -> None:
        """Counts one request against `rpm`, or refuses it."""
        self._admit(caller, "requests", self._account(caller).requests, "requests")

    def admit_count(self, caller: Caller) -> None:
        """Counts one token-counting call (`/tokenize`, `/v1/messages/count_tokens`) against `rpm`
        in a window of its own, as Anthropic's token counting has its own rate limit: each runs
        the chat template and the tokenizer, which every prompt waits for, and a gateway that
        counts each prompt before sending it (engine/openai_upstream.py) keeps its full `rpm` for
        the requests themselves."""
        self._admit(caller, "counts", self._account(caller).counts, "token counts")

    def _admit(self, caller: Caller, kind: str, window: SlidingWindow, what: str) -> None:
        rpm, now = caller.limits.rpm, self.clock()
        if rpm is not None and self._used(caller.name, kind, window.used(now)) + 1 > rpm:
            wait = window.wait_for_room(now, 1, rpm)
            message = f"rate limit reached for {caller.name}: {rpm} {what} per minute"
            raise self._refusal(caller, message, wait, figures=kind == "requests")  # they tell of requests only
        window.add(now, 1)
        self._share(caller.name, kind, 1)

    def check_tokens(self, caller: Caller, prompt_tokens: int) -> None:
        """Refuses a prompt that `tpm` or the daily quota has no room for. The prompt is spent once
        the queue takes the request, the completion when it ends."""
        limits, account, now = caller.limits, self._account(caller), self.clock()
        self._roll_day(account, now)
        day_tokens = self._used(caller.name, "day", account.day_tokens)
        if limits.daily_tokens is not None and day_tokens + prompt_tokens > limits.daily_tokens:
            raise self._refusal(
                caller,
                f"daily token quota of {limits.daily_tokens} reached for {caller.name}; it renews at 00:00 UTC",
                _until_tomorrow(now),
                code="insufficient_quota",
            )
        if limits.tpm is not None:
            if prompt_tokens > limits.tpm:
                raise self._refusal(
                    caller,
                    f"request too large for {caller.name}: {prompt_tokens} prompt tokens, "
                    f"over the limit of {limits.tpm} tokens per minute",
                    WINDOW_S,
                )
            if self._used(caller.name, "tokens", account.tokens.used(now)) + prompt_tokens > limits.tpm:
                wait = account.tokens.wait_for_room(now, prompt_tokens, limits.tpm)
                raise self._refusal(
                    caller, f"rate limit reached for {caller.name}: {limits.tpm} tokens per minute", wait
                )

    def spend(self, caller: Caller, tokens: int) -> None:
        account, now = self._account(caller), self.clock()
        self._roll_day(account, now)
        account.tokens.add(now, tokens)
        account.day_tokens += tokens
        self._share(caller.name, "tokens", tokens)
        self._share(caller.name, "day", tokens)

    def headers(self, caller: Caller) -> dict[str, str]:
        """OpenAI's rate-limit headers, for the limits this caller has."""
        limits, now = caller.limits, self.clock()
        account = self._accounts.get(caller.name) or _Account()
        out: dict[str, str] = {}
        for kind, limit, window in (("requests", limits.rpm, account.requests), ("tokens", limits.tpm, account.tokens)):
            if limit is not None:
                out[f"x-ratelimit-limit-{kind}"] = str(limit)
                used = self._used(caller.name, kind, window.used(now))
                out[f"x-ratelimit-remaining-{kind}"] = str(max(0, limit - used))
                out[f"x-ratelimit-reset-{kind}"] = duration(window.reset_s(now))
        return out

    def restore(self, name: str, day_tokens: int, recent: list[tuple[float, int, int]]) -> None:
        """Counts read back after a restart: today's tokens, and (time, requests, tokens) of the
        last minute, so a restart or a crash resets no quota and no window."""
        account, now = self._accounts.setdefault(name, _Account()), self.clock()
        self._roll_day(account, now)
        account.day_tokens = max(account.day_tokens, day_tokens)
        for at, requests, tokens in recent:
            account.requests.add(at, requests)
            account.tokens.add(at, tokens)

    def day_tokens(self, name: str) -> int:
        """Tokens spent today (UTC), against the daily quota."""
        account = self._accounts.get(name)
        if account is None:
            return 0
        self._roll_day(account, self.clock())
        return self._used(name, "day", account.day_tokens)

    def _used(self, name: str, kind: str, local: int) -> int:
        return local if self.shared is None else self.shared.used(name, kind, local)

    def _share(self, name: str, kind: str, amount: int) -> None:
        if self.shared is not None:
            self.shared.add(name, kind, amount)

    def _account(self, caller: Caller) -> _Account:
        return self._accounts.setdefault(caller.name, _Account())

    def _roll_day(self, account: _Account, now: float) -> None:
        today = int(now // DAY_S)
        if account.day != today:
            account.day, account.day_tokens = today, 0

    def _refusal(
        self, caller: Caller, message: str, wait_s: float, code: str = "rate_limit_exceeded", figures: bool = True
    ) -> Refusal:
        headers = self.headers(caller) if figures else {}
        return Refusal(429, message, code=code, retry_after_s=max(1, math.ceil(wait_s)), headers=headers)


def duration(seconds: float) -> str:
    """The form OpenAI's reset headers use: `20ms`, `6s`, `1m0s`."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole = math.ceil(seconds)
    minutes, rest = divmod(whole, 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"


def _until_tomorrow(now: float) -> float:
    return DAY_S - now % DAY_S
