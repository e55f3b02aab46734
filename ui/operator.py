"""Server-wide settings changed from the page: validated, applied live, visible in the queue status."""

from __future__ import annotations

from api.services import Services
from settings import ConfigError, load_config

MAX_CONCURRENCY = 4096


class SettingsError(ValueError):
    pass


def apply_limits(services: Services, max_concurrency: int, max_queue_size: int, low_max_wait_s: float,
                 admin_key: str = "") -> str:
    _check_admin(services, admin_key)
    limit = min(MAX_CONCURRENCY, services.engine.capabilities.max_num_seqs or MAX_CONCURRENCY)
    if not 0 <= max_concurrency <= limit:
        raise SettingsError(f"maximum concurrency must be between 0 (the engine's slots) and {limit}")
    if not 1 <= max_queue_size <= 1_000_000:
        raise SettingsError("queue size must be between 1 and 1000000")
    if not 0.1 <= low_max_wait_s <= 86_400:
        raise SettingsError("low-priority maximum wait must be between 0.1 and 86400 s")
    services.scheduler.update_limits(int(max_concurrency), int(max_queue_size), float(low_max_wait_s))
    return f"applied: concurrency {max_concurrency}, queue {max_queue_size}, low wait {low_max_wait_s:g} s"


def apply_preset(services: Services, preset: str, config_path: str, admin_key: str = "") -> tuple[int, int, float]:
    """The preset's scheduler limits, applied live; engine settings need a restart."""
    _check_admin(services, admin_key)
    try:
        chosen = load_config(config_path, preset=preset).scheduler
    except ConfigError as exc:
        raise SettingsError(str(exc)) from None
    services.scheduler.update_limits(chosen.max_concurrency, chosen.max_queue_size, chosen.max_wait_s.low)
    return chosen.max_concurrency, chosen.max_queue_size, chosen.max_wait_s.low


def _check_admin(services: Services, admin_key: str) -> None:
    keys = services.config.server.admin_keys
    if keys and admin_key not in keys:
        raise SettingsError("an admin key is needed to change server-wide settings")
