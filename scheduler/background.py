"""How many background sequences (batch lines) the engine may hold: work that runs only on
capacity interactive traffic leaves, and yields the moment that traffic needs it.

Alone, after interactive traffic has been quiet for `quiet_s`, background work may fill the engine's
slots past the running limit (the limit keeps TPOT for people waiting on each token, and nobody is):
vLLM's CPU build and its own server gave the most tokens/s at 96-128 of its 128 slots, llama.cpp as
much at its 16 as at 8 or 24, a GPU near its slots. Beside interactive requests it may add
only what slows them by `slowdown`: each line's decode cost, from the fitted line of TPOT against
the batch, plus its prompt's prefill, which on a CPU stalls every step (on vLLM's CPU build a
line's prefill took 6 % of its life, its decode 3 % of a step); and only what the running limit has
left. Whatever background holds over that when an interactive request arrives is preempted (aborted
and tried again later): its lines lose their tokens so far, people lose nothing."""

from __future__ import annotations

from scheduler.tpot_line import TpotLine

_SMOOTHING = 0.1  # weight of the newest finished background sequence


class BackgroundShare:
    """Pure: the slots background work may hold, from the interactive load and the clock."""

    def __init__(self, slowdown: float, quiet_s: float, line: TpotLine) -> None:
        self.slowdown = slowdown
        self.quiet_s = quiet_s
        self.line = line
        self.last_interactive_s = float("-inf")  # when an interactive request last arrived or ended
        self.prefill_share = 0.0  # a background sequence's prefill over its life in the engine

    def seen_interactive(self, now: float) -> None:
        self.last_interactive_s = now

    def finished(self, prefill_s: float, life_s: float) -> None:
        """One background sequence's time to its first token and in the engine, to price its prefill."""
        if life_s > 0:
            self.prefill_share += _SMOOTHING * (min(1.0, prefill_s / life_s) - self.prefill_share)

    def slots(self, interactive: int, now: float, limit: int, fill: int) -> int:
        """`interactive`: interactive requests running or waiting; `limit`: the running limit;
        `fill`: the engine's slots background may fill when alone."""
        if interactive == 0 and now - self.last_interactive_s >= self.quiet_s:
            return fill
        extra = self.line.extra_within(interactive, self.slowdown, self.prefill_share)
        return max(0, min(limit - interactive, extra, fill))
