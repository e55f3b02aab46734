"""Time per output token as the engine delivers it: the gaps between a sequence's outputs.

Measured where every engine's output passes (the scheduler), so the adaptive limit works the same
over vLLM, the simulator or any future backend. The limit reads only the gaps during which no
prompt was being prefilled: a prefill stalls every running sequence's step by the same time
whatever the batch, so on an engine whose prefill is slow next to a decode step (llama.cpp on a CPU:
0.2-0.3 s per prompt against 30-100 ms a step) those gaps said "too many running" when cutting the
batch only queued work without making the next prefill shorter. What prefills add to the TPOT
clients see is left to the set point, which is trimmed by each request's own TPOT over the batch's
prefill-free TPOT during its life.
"""

from __future__ import annotations

from collections import deque

_KEPT = 1024  # prefill ends remembered: far more than arrive while a gap waits to be classified
_SAME_STEP_S = 0.05  # one step's outputs reach their requests within this of each other (or half a gap)


def _reach(start: float, end: float) -> float:
    """How far from a gap's end a first token may come and still be of the step that ended it."""
    return min((end - start) / 2, _SAME_STEP_S)


class PrefillWatch:
    """When prompts' prefills ended: the engine step that yields a request's first token is the one
    its prefill stretched, for every sequence decoding beside it. The outputs of one step reach
    their requests one after another, in an order the engine chooses (vLLM's: the decoding ones
    before the new ones), so a gap is judged by the first tokens that came within `_reach` of its
    end, on either side: read as they came, the stalled step counted as clean and the clean step
    after it as stalled."""

    def __init__(self) -> None:
        self._ends: deque[float] = deque(maxlen=_KEPT)

    def ended(self, now: float) -> None:
        self._ends.append(now)

    def overlaps(self, start: float, end: float) -> bool:
        """Whether a prefill ended in the engine step that closed the gap from `start` to `end`."""
        reach = _reach(start, end)
        for t in reversed(self._ends):
            if t <= start + reach:
                return False
            if t <= end + reach:
                return True
        return False


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
    any two moments (`mark`, `since`). A gap is classified once `_reach` has passed after it
    (`PrefillWatch`), so the figures lag the engine by that much."""

    def __init__(self) -> None:
        self.prefills = PrefillWatch()
        self._all, self._clean = _Sums(), _Sums()
        self._total: tuple[float, int] = (0.0, 0)
        self._held = 0
        self._pending: list[tuple[float, float, int, int]] = []

    def record(self, start: float, end: float, tokens: int, running: int) -> None:
        """`tokens` came at `end`, the sequence's previous output at `start`, `running` sequences beside."""
        if tokens > 0:
            self._pending.append((start, max(end, start), tokens, running))
        self._settle(end)

    def _settle(self, now: float) -> None:
        if not self._pending:
            return
        waiting = [gap for gap in self._pending if gap[1] + _reach(*gap[:2]) > now]
        for start, end, tokens, running in self._pending:
            if end + _reach(start, end) > now:
                continue
            self._all.add(end - start, tokens, running)
            if not self.prefills.overlaps(start, end):
                self._clean.add(end - start, tokens, running)
                self._total = (self._total[0] + end - start, self._total[1] + tokens)
        self._pending = waiting

    def mark(self) -> tuple[float, int]:
        return self._total

    def since(self, mark: tuple[float, int]) -> float | None:
        """The token-weighted mean prefill-free TPOT since `mark`; None when no such token came."""
        tokens = self._total[1] - mark[1]
        return (self._total[0] - mark[0]) / tokens if tokens else None

    def take(self, now: float) -> tuple[float | None, float]:
        """(token-weighted mean TPOT or None, mean running sequences), over the prefill-free gaps
        classified by `now`; None when nothing was decoded, or while prefills leave too few such gaps."""
        self._settle(now)
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
