"""Server-wide settings changed from the page by an admin: validated against the bounds the
settings declare, applied live, visible in the queue status."""

from __future__ import annotations

from engine.base import EngineBackend
from pipeline.caller import Caller
from scheduler.loop import Scheduler
from settings import ConfigError, load_config
from settings.schema import PressureConfig, SchedulerConfig, field_bounds


class SettingsError(ValueError):
    pass


def apply_limits(
    scheduler: Scheduler,
    engine: EngineBackend,
    caller: Caller,
    max_concurrency: int,
    max_queue_size: int,
    low_max_wait_s: float,
) -> str:
    _check_admin(caller)
    lo, hi = field_bounds(SchedulerConfig, "max_concurrency")
    hi = min(hi, engine.capabilities.max_num_seqs or hi)
    if not lo <= max_concurrency <= hi:
        raise SettingsError(f"maximum concurrency must be between {lo} (the engine's slots) and {hi}")
    lo, hi = field_bounds(SchedulerConfig, "max_queue_size")
    if not lo <= max_queue_size <= hi:
        raise SettingsError(f"queue size must be between {lo} and {hi}")
    lo, _ = field_bounds(PressureConfig, "low_max_wait_s")
    if not lo <= low_max_wait_s <= 86_400:
        raise SettingsError(f"low-priority maximum wait must be between {lo} and 86400 s")
    scheduler.update_limits(int(max_concurrency), int(max_queue_size), float(low_max_wait_s))
    return f"applied: concurrency {max_concurrency}, queue {max_queue_size}, low wait {low_max_wait_s:g} s"


def apply_preset(scheduler: Scheduler, caller: Caller, preset: str, config_path: str) -> tuple[int, int, float]:
    """The preset's scheduler limits, applied live; engine settings need a restart."""
    _check_admin(caller)
    try:
        chosen = load_config(config_path, preset=preset).scheduler
    except ConfigError as exc:
        raise SettingsError(str(exc)) from None
    scheduler.update_limits(chosen.max_concurrency, chosen.max_queue_size, chosen.max_wait_s.low)
    return chosen.max_concurrency, chosen.max_queue_size, chosen.max_wait_s.low


def _check_admin(caller: Caller) -> None:
    if not caller.admin:
        raise SettingsError("only an admin may change server-wide settings; sign in with an admin key")
