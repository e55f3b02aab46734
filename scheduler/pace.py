"""Time per output token as the engine delivers it: the gaps between a sequence's outputs.

Measured where every engine's output passes (the scheduler), so the adaptive limit works the same
over vLLM, the simulator or any future backend, and sees what clients see, prefill stalls included.
"""

from __future__ import annotations


class TokenPace:
    """Accumulates gaps over one control interval; `take` returns the interval's figures and resets.
    Running totals besides give the mean TPOT between any two moments (`mark`, `since`)."""

    def __init__(self) -> None:
        self._seconds = 0.0
        self._tokens = 0
        self._running_tokens = 0.0
        self._total: tuple[float, int] = (0.0, 0)

    def record(self, gap_s: float, tokens: int, running: int) -> None:
        if tokens <= 0:
            return
        self._seconds += max(gap_s, 0.0)
        self._tokens += tokens
        self._running_tokens += running * tokens
        self._total = (self._total[0] + max(gap_s, 0.0), self._total[1] + tokens)

    def mark(self) -> tuple[float, int]:
        return self._total

    def since(self, mark: tuple[float, int]) -> float | None:
        """The token-weighted mean TPOT of every sequence since `mark`; None when nothing was decoded."""
        tokens = self._total[1] - mark[1]
        return (self._total[0] - mark[0]) / tokens if tokens else None

    def take(self) -> tuple[float | None, float]:
        """(token-weighted mean TPOT or None when nothing was decoded, mean running sequences)."""
        if not self._tokens:
            return None, 0.0
        tpot, running = self._seconds / self._tokens, self._running_tokens / self._tokens
        self._seconds, self._tokens, self._running_tokens = 0.0, 0, 0.0
        return tpot, running
