"""What the HTTP and UI layers are handed: configuration, the engine and the scheduler."""

from __future__ import annotations

from dataclasses import dataclass

from engine.base import EngineBackend
from scheduler.loop import Scheduler
from settings.schema import Config


@dataclass(slots=True)
class Services:
    config: Config
    engine: EngineBackend
    scheduler: Scheduler
