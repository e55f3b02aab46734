"""What the HTTP and UI layers are handed: configuration, the engine and the scheduler."""

from __future__ import annotations

from dataclasses import dataclass, field

from cache.flight import SingleFlight
from cache.store import ResponseCache
from engine.base import EngineBackend
from monitor.alerts import AlertNotifier
from monitor.gpu import GpuMonitor
from scheduler.loop import Scheduler
from settings.schema import Config


@dataclass(slots=True)
class Services:
    config: Config
    engine: EngineBackend
    scheduler: Scheduler
    cache: ResponseCache | None = None
    flight: SingleFlight = field(default_factory=SingleFlight)
    gpu: GpuMonitor | None = None
    alerts: AlertNotifier | None = None
