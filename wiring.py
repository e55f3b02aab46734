"""The parts of one server, built once from the configuration and handed to the transports."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from batches.runner import BatchRunner
from batches.store import BatchStore
from cache.redis_store import RedisResponseCache
from cache.similar import SimilarAnswers
from cache.store import ResponseCache
from engine.base import EngineBackend
from engine.registry import create_engine
from monitor.alerts import AlertNotifier
from monitor.gpu import GpuMonitor, MemoryGuard, NvmlReader
from pipeline.cache_path import CachePath
from pipeline.caller import Keyring
from pipeline.chat import ChatPipeline
from pipeline.key_store import KeyStore
from pipeline.rate_limit import RateLimiter
from pipeline.shared_counts import SharedCounts
from pipeline.shared_usage import SharedUsage
from pipeline.usage import Fanout, UsageLedger
from pipeline.usage_file import UsageFile
from responses.redis_store import RedisResponseStore, gateway_name
from responses.sealed import ReasoningSeal
from responses.store import ChainedStore, ResponseStore
from scheduler.loop import Scheduler
from scheduler.pace_file import PaceFile
from settings.schema import Config


@dataclass(slots=True)
class Services:
    config: Config
    engine: EngineBackend
    scheduler: Scheduler
    keyring: Keyring
    pipeline: ChatPipeline
    responses: ChainedStore
    reasoning_seal: ReasoningSeal
    batches: BatchStore
    cache: ResponseCache | RedisResponseCache | None = None
    gpu: GpuMonitor | None = None
    alerts: AlertNotifier | None = None
    shared_counts: SharedCounts | None = None  # the limiter's counts on Redis, synced in the background
    shared_usage: SharedUsage | None = None  # the usage ledger's minutes on Redis, likewise
    usage_file: UsageFile | None = None  # the usage ledger's minutes on disk
    key_store: KeyStore | None = None  # keys made at run time, and the audit log, in the same file
    batch_runner: BatchRunner | None = None  # built with the API (its lines are answered as the API would)
    pace_file: PaceFile | None = None  # what the running limit learned of the engine, across restarts


def build_services(config: Config) -> Services:
    engine = create_engine(config.engine)
    cache = _cache(config)
    scheduler = Scheduler(config.scheduler, engine)
    keyring = Keyring(config)
    state = config.state
    # The local limiter and ledger know only the small interfaces they declare (SharedTally,
    # MinuteSink); which implementation sits behind them is chosen here.
    counts = (
        SharedCounts(state.redis_url, keyring.limits_by_name(), state.sync_interval_s) if state.shared_limits else None
    )
    minutes = SharedUsage(state.redis_url, state.sync_interval_s) if state.shared_usage else None
    on_disk = config.usage
    usage_file = (
        UsageFile(on_disk.path, on_disk.retention_days * 86_400, on_disk.flush_interval_s) if on_disk.path else None
    )
    sinks = [s for s in (usage_file, minutes) if s is not None]
    usage = UsageLedger(shared=Fanout(*sinks) if len(sinks) > 1 else sinks[0] if sinks else None)
    pipeline = ChatPipeline(
        config, engine, scheduler, CachePath(cache, config.cache), RateLimiter(shared=counts), usage
    )
    seal = ReasoningSeal.from_file(Path(config.responses.path).with_suffix(".key"))
    stored = config.batches
    batches = BatchStore(stored.path, stored.max_files, stored.max_bytes, stored.max_batches, stored.retention_s)
    services = Services(
        config,
        engine,
        scheduler,
        keyring,
        pipeline,
        _responses(config),
        seal,
        batches,
        cache,
        _gpu_monitor(config, scheduler),
        shared_counts=counts,
        shared_usage=minutes,
        usage_file=usage_file,
        key_store=KeyStore(on_disk.path) if on_disk.path else None,
        pace_file=PaceFile(config.scheduler.limit.pace_path) if config.scheduler.limit.pace_path else None,
    )
    if config.alerts.webhook_url:
        services.alerts = AlertNotifier(
            config.alerts, lambda: (scheduler.recent_wait_s(), len(scheduler.queue)), time.monotonic
        )
    return services


def _cache(config: Config) -> ResponseCache | RedisResponseCache | None:
    if not config.cache.enabled or config.cache.mode == "off":
        return None
    if config.cache.backend == "redis":
        return RedisResponseCache(config.cache, config.state.redis_url)
    similar = SimilarAnswers(config.cache.similar, config.cache.max_entries) if config.cache.similar.enabled else None
    return ResponseCache(config.cache, similar=similar)


def _responses(config: Config) -> ChainedStore:
    stored = config.responses
    if stored.backend == "redis":
        return RedisResponseStore(
            config.state.redis_url,
            stored.ttl_s,
            stored.max_responses,
            gateway_name(config.server.port),
            max_per_caller=stored.max_per_caller,
            max_bytes=stored.max_bytes,
            max_bytes_per_caller=stored.max_bytes_per_caller,
        )
    return ResponseStore(
        stored.path,
        stored.ttl_s,
        stored.max_responses,
        max_per_caller=stored.max_per_caller,
        max_bytes=stored.max_bytes,
        max_bytes_per_caller=stored.max_bytes_per_caller,
    )


def _gpu_monitor(config: Config, scheduler: Scheduler) -> GpuMonitor | None:
    cfg = config.monitor
    if not cfg.gpu:
        return None
    guard = MemoryGuard(cfg.vram_high_pct, cfg.vram_resume_pct)
    return GpuMonitor(NvmlReader, guard, cfg.interval_s, scheduler.set_admission_paused)
