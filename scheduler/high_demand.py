"""How many slots high requests need: their arrival rate times their time in the engine.

The running limit follows TPOT, and on engines whose prefill stalls every decode step (llama.cpp on
a CPU) it can fall to a handful of sequences under load. Counting high requests against that limit
made a high arrival wait for another high to finish, seconds past its 1 s promise, while high
traffic alone fitted the engine. High may therefore hold as many slots as its own traffic keeps busy:
by Little's law the mean number in the engine is rate x service time, and the count of an M/G/inf
system is Poisson, so the mean plus 2.33 standard deviations covers 99 % of moments. The service
time is taken at the objective's pace (time to first token plus tokens x the TPOT the limit aims
at), not as measured: a measured time that grew with the batch would widen the reserve, grow the
batch further, and feed itself where high alone is over capacity.
"""

from __future__ import annotations

import math

_SMOOTHING = 0.2  # weight of the newest finished high request
_Z99 = 2.33


class HighDemand:
    """Pure: fed each finished high request, it sizes the slots high traffic keeps busy."""

    def __init__(self) -> None:
        self.service_s: float | None = None
        self.first_token_s = 0.0  # from start to first token, smoothed: what a high's wait leaves of its promise

    def finished(self, first_token_s: float, decoded: int, target_tpot_s: float) -> None:
        first_token_s = max(first_token_s, 0.0)
        service = first_token_s + max(decoded, 0) * target_tpot_s
        self.first_token_s = first_token_s if self.service_s is None else _smoothed(self.first_token_s, first_token_s)
        self.service_s = service if self.service_s is None else _smoothed(self.service_s, service)

    def busy(self, rate_per_s: float) -> float:
        """Slots the high requests arriving at `rate_per_s` keep busy on average; 0 unknown."""
        if self.service_s is None or rate_per_s <= 0:
            return 0.0
        return rate_per_s * self.service_s

    def slots(self, rate_per_s: float) -> int:
        """Slots that hold the high requests arriving at `rate_per_s` 99 % of the time; 0 unknown."""
        mean = self.busy(rate_per_s)
        return math.ceil(mean + _Z99 * math.sqrt(mean)) if mean else 0


def _smoothed(old: float, new: float) -> float:
    return old + _SMOOTHING * (new - old)
