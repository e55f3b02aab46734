"""Time per output token as the engine delivers it: the gaps between a sequence's outputs.

Measured where every engine's output passes (the scheduler), so the adaptive limit works the same
over vLLM, the simulator or any future backend. The limit reads only the gaps during which no
prompt was being prefilled: a prefill stalls every running sequence's step by the same time
whatever the batch, so on an engine whose prefill is slow next to a decode step (llama.cpp on a CPU:
0.2-0.3 s per prompt against 30-100 ms a step) those gaps said "too many running" when cutting the
batch only queued work without making the next prefill shorter. What prefills add to the TPOT
clients see is left to the set point, which is trimmed by each request's own TPOT over the batch's
prefill-free TPOT during its life, and to `seen_s`, the interval over every gap, which bounds the
limit only while the batch fills it (scheduler/limit.py).

vLLM hands a step's outputs to its decoding sequences before the new ones, so there the gap a
prefill stretched is read as clean and the clean one after it as stalled. Judged by the step
instead, the limit grew and requests' own TPOT went past the objective at 1.5x-5x capacity
(docs/BENCHMARKS.md, "The top of the curve", fifth session): what it reads is closer to what
clients see, and it stays.
"""

from __future__ import annotations


class PrefillWatch:
    """When a prompt's prefill last ended: the engine step that yields a request's first token is
    the one its prefill stretched, for every sequence decoding beside it."""

    def __init__(self) -> None:
        self._last_end = float("-inf")

    def ended(self, now: float) -> None:
        self._last_end = now

    def overlaps(self, since: float) -> bool:
        """Whether a prefill ended after `since`: the gap from then to now held one."""
        return self._last_end > since


_CLEAN_SHARE = 0.25  # fewer prefill-free tokens than this: no reading (a burst of prompts prefilling)...
_HELD_MAX = 5  # ...unless it lasts this many intervals: on an engine always prefilling, read every gap


class _Sums:
    def __init__(self) -> None:
        self.seconds, self.tokens, self.running_tokens = 0.0, 0, 0.0

    def add(self, gap_s: float, tokens: int, running: int) -> None:
        self.seconds += gap_s
        self.tokens += tokens
        self.running_tokens += running * tokens


class TokenPace:
    """Accumulates gaps over one control interval, the prefill-free ones apart; `take` returns the
    interval's figures and resets. Running totals besides give the mean prefill-free TPOT between
    any two moments (`mark`, `since`)."""

    def __init__(self) -> None:
        self._all, self._clean = _Sums(), _Sums()
        self._total: tuple[float, int] = (0.0, 0)
        self._held = 0
        self.seen_s: float | None = None  # the last interval's TPOT over every gap, prefills' too: what clients saw

    def record(self, gap_s: float, tokens: int, running: int, during_prefill: bool = False) -> None:
        if tokens <= 0:
            return
        gap_s = max(gap_s, 0.0)
        self._all.add(gap_s, tokens, running)
        if not during_prefill:
            self._clean.add(gap_s, tokens, running)
            self._total = (self._total[0] + gap_s, self._total[1] + tokens)

    def mark(self) -> tuple[float, int]:
        return self._total

    def since(self, mark: tuple[float, int]) -> float | None:
        """The token-weighted mean prefill-free TPOT since `mark`; None when no such token came."""
        tokens = self._total[1] - mark[1]
        return (self._total[0] - mark[0]) / tokens if tokens else None

    def take(self) -> tuple[float | None, float]:
        """(token-weighted mean TPOT or None, mean running sequences), over the prefill-free gaps;
        None when nothing was decoded, or while prefills leave too few such gaps."""
        seen = self._all
        self.seen_s = seen.seconds / seen.tokens if seen.tokens else None
        sums, self._all, self._clean = self._reading(), _Sums(), _Sums()
        if sums is None:
            return None, 0.0
        return sums.seconds / sums.tokens, sums.running_tokens / sums.tokens

    def _reading(self) -> _Sums | None:
        if not self._all.tokens:
            return None
        if self._clean.tokens >= _CLEAN_SHARE * self._all.tokens:
            self._held = 0
            return self._clean
        self._held += 1
        return self._all if self._held >= _HELD_MAX else None
