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

    def finished(self, first_token_s: float, decoded: int, target_tpot_s: float) -> None:
        service = max(first_token_s, 0.0) + max(decoded, 0) * target_tpot_s
        self.service_s = service if self.service_s is None else self.service_s + _SMOOTHING * (service - self.service_s)

    def busy(self, rate_per_s: float) -> float:
        """Slots the high requests arriving at `rate_per_s` keep busy on average; 0 unknown."""
        if self.service_s is None or rate_per_s <= 0:
            return 0.0
        return rate_per_s * self.service_s

    def slots(self, rate_per_s: float) -> int:
        """Slots that hold the high requests arriving at `rate_per_s` 99 % of the time; 0 unknown."""
        mean = self.busy(rate_per_s)
        return math.ceil(mean + _Z99 * math.sqrt(mean)) if mean else 0
