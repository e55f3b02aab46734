"""Everything the scheduler knows, declared in one place: the pure policy parts (queue order,
admission, pressure, estimates, each caller's share) and the mechanism's books (tickets, engine
tasks, finished outcomes). The door, the dispatcher, the controller and the ledger all read and
change this one state; none keeps any of its own."""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.base import EngineBackend
from scheduler.admission import AdmissionController
from scheduler.background import BackgroundShare
from scheduler.caller_share import CallerShare
from scheduler.demand import Demand
from scheduler.engine_ids import EngineIds
from scheduler.estimate import ArrivalRates, DrainEstimator, StartRate
from scheduler.events import Listener
from scheduler.fair_share import VirtualTokenCounter
from scheduler.high_demand import HighDemand
from scheduler.idle_waits import IdleWaits
from scheduler.limit import ConcurrencyLimit
from scheduler.pace import PrefillWatch, TokenPace
from scheduler.pressure import PressureMonitor
from scheduler.queue import PriorityQueue
from scheduler.request import RequestKey, Ticket
from scheduler.tpot_line import TpotLine
from settings.schema import SchedulerConfig

NO_SLOT_LIMIT = 4096  # the running limit's ceiling when neither the config nor the engine sets one


@dataclass(eq=False)
class SchedulerState:
    config: SchedulerConfig
    engine: EngineBackend
    clock: Callable[[], float]
    queue: PriorityQueue
    limit: ConcurrencyLimit
    admission: AdmissionController
    pressure: PressureMonitor
    share: CallerShare
    tpot_line: TpotLine
    background: BackgroundShare
    demand: Demand
    high_load: Demand  # the same, of high requests alone: a burst of them runs at once (scheduler/controller.py)
    drain: DrainEstimator = field(default_factory=DrainEstimator)
    arrivals: ArrivalRates = field(default_factory=ArrivalRates)
    starts: StartRate = field(default_factory=StartRate)  # for what a waiter is told (scheduler/ledger.py)
    high_demand: HighDemand = field(default_factory=HighDemand)
    pace: TokenPace = field(default_factory=TokenPace)
    prefills: PrefillWatch = field(default_factory=PrefillWatch)
    engine_ids: EngineIds = field(default_factory=EngineIds)
    idle_waits: IdleWaits = field(default_factory=IdleWaits)
    closed: bool = False
    take_back: bool = False  # lower requests give their slots to high: the engine resumes sequences, the config allows
    taken_back: int = 0  # slots lower requests gave back (to a high, or a burst's) so far
    lend_again_at: float = 0.0  # no slot is lent past the running limit before this (scheduler/controller.py)
    tickets: dict[RequestKey, Ticket] = field(default_factory=dict)  # by caller and id: each caller's ids are its own
    tasks: dict[RequestKey, asyncio.Task] = field(default_factory=dict)
    finished: OrderedDict[RequestKey, dict] = field(default_factory=OrderedDict)
    recent_waits: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=200))
    listeners: list[Listener] = field(default_factory=list)

    @classmethod
    def build(cls, config: SchedulerConfig, engine: EngineBackend, clock: Callable[[], float]) -> SchedulerState:
        limit = ConcurrencyLimit(config.limit, config.slo.tpot_s, config.max_concurrency or NO_SLOT_LIMIT)
        admission = AdmissionController(
            limit.value, token_budget=0, high_reserve=config.limit.high_reserve, upper=limit.upper
        )
        fair = config.fair_share
        share = CallerShare(VirtualTokenCounter(fair.input_weight, fair.output_weight) if fair.enabled else None)
        line = TpotLine()
        return cls(
            config,
            engine,
            clock,
            PriorityQueue(config.aging_per_s),
            limit,
            admission,
            PressureMonitor(config.pressure, config.slo.ttft_s),
            share,
            line,
            BackgroundShare(config.background.slowdown, config.background.quiet_s, line),
            Demand(config.limit.demand_window_s),
            Demand(config.limit.demand_window_s),
        )

    def background_slots(self) -> int:
        """Background sequences the engine may hold now (background work never waits in the queue,
        so every waiter is interactive)."""
        a = self.admission
        return self.background.slots(self.interactive(), self.clock(), a.max_concurrency, a.background_fill())

    def interactive(self) -> int:
        """Interactive requests running or waiting."""
        return self.admission.running - self.admission.background_running + len(self.queue)

    def before_response(self, request_key: RequestKey) -> bool:
        """Whether the client still has no 200 and no answer under way: a waiter whose stream opened
        could not retry a 429, and one that gave its slot to high has its answer half written, so
        neither is displaced nor timed out; it waits its turn, which aging brings."""
        ticket = self.tickets.get(request_key)
        return ticket is None or not (ticket.stream_open or ticket.request.suspended)
