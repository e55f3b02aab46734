"""One read model of the scheduler: the queue status, the metrics and the monitor all render this."""

from __future__ import annotations

from dataclasses import dataclass

from engine.base import EngineStats
from scheduler.loop import Scheduler
from scheduler.request import PriorityClass


@dataclass(slots=True, frozen=True)
class PerClass:
    high: float | None
    medium: float | None
    low: float | None

    def of(self, priority: PriorityClass) -> float | None:
        return getattr(self, priority.value)

    def as_dict(self) -> dict[str, float | None]:
        return {c.value: self.of(c) for c in PriorityClass}


@dataclass(slots=True, frozen=True)
class Snapshot:
    engine_ready: bool
    waiting: dict[PriorityClass, int]
    running: int
    limit: int  # the running limit now (adaptive)
    unbounded: bool  # the engine alone would serve the interactive load on time: the limit does not bind
    background_fill: int  # batch lines the engine holds at most when nothing else runs: its slots (0: not ready)
    max_concurrency: int  # the limit's upper bound
    adaptive: bool
    measured_tpot_s: float | None
    tpot_set_point_s: float  # where the limit keeps measured TPOT: under the objective by requests' spread
    slo_tpot_s: float
    slo_ttft_s: float
    token_budget: int | None
    tokens_in_use: int
    lower_prefills: int | None  # medium and low requests prefilling at once at most; None: any number
    burst_prefills: int | None  # ...in a burst the engine alone would serve on time
    max_queue_size: int
    max_wait_s: PerClass
    avg_wait_s: float  # over the last pressure interval: waits of admitted requests and waiters so far
    estimated_wait_s: PerClass  # for a request arriving now
    emergency: bool
    admission_paused: bool
    engine: EngineStats | None
    idle_wait_s: dict[str, float]  # seconds waited in our queue while the engine had room, per class, since start
    taken_back: int  # slots lower requests gave back (to a high, or at a burst's end), since start

    @property
    def waiting_total(self) -> int:
        return sum(self.waiting.values())

    @property
    def free_slots(self) -> int:
        return max(0, self.limit - self.running)


def snapshot(s: Scheduler) -> Snapshot:
    admission = s.admission
    return Snapshot(
        engine_ready=s.engine.ready,
        waiting={c: s.queue.count(c) for c in PriorityClass},
        running=admission.running,
        limit=admission.max_concurrency,
        unbounded=admission.unbounded,
        background_fill=admission.background_fill() if s.engine.ready else 0,
        max_concurrency=s.limit.upper,
        adaptive=s.config.limit.adaptive,
        measured_tpot_s=s.limit.tpot_s,
        tpot_set_point_s=s.limit.target_s,
        slo_tpot_s=s.config.slo.tpot_s,
        slo_ttft_s=s.config.slo.ttft_s,
        token_budget=admission.token_budget,
        tokens_in_use=admission.tokens_in_use,
        lower_prefills=admission.lower_prefills,
        burst_prefills=admission.burst_prefills,
        max_queue_size=s.config.max_queue_size,
        max_wait_s=PerClass(*(s.max_wait_s(c) for c in PriorityClass)),
        avg_wait_s=s.recent_wait_s(),
        estimated_wait_s=PerClass(*(_estimate(s, c) for c in PriorityClass)),
        emergency=s.pressure.emergency,
        admission_paused=admission.paused,
        engine=s.engine.stats() if s.engine.ready else None,
        idle_wait_s={c.value: s.state.idle_waits.total_s[c] for c in PriorityClass},
        taken_back=s.state.taken_back,
    )


def _estimate(s: Scheduler, priority: PriorityClass) -> float | None:
    ahead = s.queue.count_ahead_of_new(s.pressure.weight(priority, s.config.weights.of(priority.value)), s.clock())
    return s.estimated_wait_s(ahead + 1 if ahead or not s.admission.free_slots else 0, priority)
