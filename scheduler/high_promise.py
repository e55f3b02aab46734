"""How far under its set point the running limit aims while high requests' first tokens come close
to their promise (`slo.ttft_s`).

Past capacity the high class can be half the batch, and a high request's first token takes a few
engine steps (its prefill waits for the step under way, then shares one with every running
sequence): 2 steps at the median and 5 in a burst of highs, measured on vLLM at 3x capacity. Each
step lasts about the TPOT the limit keeps, so a TPOT objective of 0.3 s leaves no room for a 1 s
first token. The only lever is a shorter step: fewer sequences running. So each high first token
over `_NEAR` of the promise cuts the TPOT the limit aims at, and calm (no high over `_CALM` of it
for `_CALM_FOR_S`) gives it back, slowly, since a shrunk limit takes a lower request's lifetime to
show. `_FLOOR` bounds the cut where a shorter step does not help (a first token that is the
prompt's own prefill, as on llama.cpp on a CPU). Pure, with the clock passed in.
"""

from __future__ import annotations

_NEAR = 0.8
_CALM = 0.5
_CALM_FOR_S = 10.0
_CUT = 0.9  # per first token near the promise
_GIVE_BACK_PER_S = 0.02
_FLOOR = 0.5


class HighPromise:
    def __init__(self, promise_s: float, enabled: bool = True) -> None:
        self.promise_s = promise_s
        self.enabled = enabled
        self.scale = 1.0
        self._last_slow = float("-inf")
        self._last_update: float | None = None

    def first_token(self, ttft_s: float, now: float) -> None:
        """A high request's first token, `ttft_s` after it arrived."""
        if not self.enabled:
            return
        if ttft_s > _CALM * self.promise_s:
            self._last_slow = now
        if ttft_s > _NEAR * self.promise_s:
            self.scale = max(_FLOOR, self.scale * _CUT)

    def update(self, now: float) -> float:
        """Once per control interval: the share of the set point the limit aims at."""
        elapsed = 0.0 if self._last_update is None else now - self._last_update
        self._last_update = now
        if now - self._last_slow >= _CALM_FOR_S:
            self.scale = min(1.0, self.scale + _GIVE_BACK_PER_S * elapsed)
        return self.scale
