"""Prometheus metrics, prefix `gptoss_`: counters and histograms fed by queue events, gauges read
from the live state at scrape time. Each server has its own registry."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from cache.similar import SimilarAnswers
from monitor.gpu import GpuMonitor
from pipeline.usage import UsageLedger
from scheduler.events import QueueEvent
from scheduler.loop import Scheduler
from scheduler.outcome import Outcome
from scheduler.snapshot import Snapshot, snapshot

_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class CacheCounts(Protocol):
    """What either response cache (SQLite or Redis) counts."""

    hits: int
    misses: int


class Metrics:
    def __init__(
        self,
        scheduler: Scheduler,
        cache: CacheCounts | None,
        gpu: GpuMonitor | None,
        abandoned: Mapping[str, int],
        usage: UsageLedger,
        tool_calls: Mapping[str, int] | None = None,
        batch_lines: Callable[[], dict[str, tuple[str, int, int]]] | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.admitted = Counter(
            "gptoss_requests_admitted", "Requests admitted into the engine", ["priority"], registry=r
        )
        self.rejected = Counter(
            "gptoss_requests_rejected", "Requests refused or dropped from the queue", ["priority", "reason"], registry=r
        )
        self.timed_out = Counter(
            "gptoss_requests_timed_out", "Requests that waited past their class's limit", ["priority"], registry=r
        )
        self.disconnected = Counter(
            "gptoss_requests_disconnected", "Requests whose client left", ["priority", "stage"], registry=r
        )
        self.failed = Counter("gptoss_requests_failed", "Requests the engine failed", ["priority"], registry=r)
        self.yielded = Counter(
            "gptoss_batch_lines_yielded",
            "Batch lines that gave their slot to interactive work and were tried again",
            registry=r,
        )
        self.failed_in_stream = Counter(
            "gptoss_requests_failed_in_stream",
            "Requests that failed after their stream had opened (HTTP 200 then an error event)",
            ["priority", "reason"],
            registry=r,
        )
        self.accepted_then_failed = Counter(
            "gptoss_requests_accepted_then_failed",
            "Requests the door accepted "
            "that then ended without an answer, not by their client's choice "
            "(queue timeout, displaced, engine failure, shutdown)",
            ["priority", "reason"],
            registry=r,
        )
        self.queue_wait, self.ttft, self.e2e = _latency_histograms(r)
        r.register(_LiveState(scheduler, cache, gpu, abandoned, {} if tool_calls is None else tool_calls))
        r.register(_CallerUsage(usage))
        if batch_lines is not None:
            r.register(_BatchLines(batch_lines))
        scheduler.listeners.append(self.on_event)

    def on_event(self, event: QueueEvent) -> None:
        cls = event.priority.value
        if event.kind == "admitted":
            self.admitted.labels(cls).inc()
            self.queue_wait.labels(cls).observe(event.wait_s)
        elif event.kind == "first_token":
            self.ttft.labels(cls).observe(event.elapsed_s)
        elif event.outcome is Outcome.YIELDED:
            self.yielded.inc()
            return
        elif event.kind == "rejected":
            self.rejected.labels(cls, str(event.outcome)).inc()
        elif event.outcome is Outcome.FINISH:
            self.e2e.labels(cls).observe(event.elapsed_s)
            return
        elif event.outcome is Outcome.TIMEOUT:
            self.timed_out.labels(cls).inc()
        elif event.outcome is Outcome.DISCONNECT:
            self.disconnected.labels(cls, "running" if event.was_running else "queued").inc()
        elif event.outcome is Outcome.ENGINE_ERROR:
            self.failed.labels(cls).inc()
        else:
            self.rejected.labels(cls, str(event.outcome)).inc()
        if event.kind == "finished" and event.outcome is not Outcome.DISCONNECT:
            self.accepted_then_failed.labels(cls, str(event.outcome)).inc()
            if event.in_stream:
                self.failed_in_stream.labels(cls, str(event.outcome)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _latency_histograms(r: CollectorRegistry) -> tuple[Histogram, Histogram, Histogram]:
    """Queue wait, time to first token and duration, per class."""
    queue_wait = Histogram(
        "gptoss_queue_wait_seconds",
        "Time from arrival to admission",
        ["priority"],
        buckets=_WAIT_BUCKETS,
        registry=r,
    )
    ttft = Histogram(
        "gptoss_time_to_first_token_seconds",
        "Time from arrival to the first token",
        ["priority"],
        buckets=_LATENCY_BUCKETS,
        registry=r,
    )
    e2e = Histogram(
        "gptoss_request_duration_seconds",
        "Time from arrival to the last token of a completed request",
        ["priority"],
        buckets=_LATENCY_BUCKETS,
        registry=r,
    )
    return queue_wait, ttft, e2e


class _BatchLines:
    """Batch lines running and waiting per unfinished batch, read at scrape (`batch_lines`: batch id
    -> owner, running, waiting; at most `batches.max_unfinished` per caller, so the labels stay few)."""

    def __init__(self, batch_lines: Callable[[], dict[str, tuple[str, int, int]]]) -> None:
        self.batch_lines = batch_lines

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[Metric]:
        batches = self.batch_lines()
        per_batch = GaugeMetricFamily(
            "gptoss_batch_lines",
            "Lines of each unfinished batch, in the engine (running) or still to run (waiting)",
            labels=["batch", "owner", "state"],
        )
        for batch_id, (owner, running, waiting) in sorted(batches.items()):
            per_batch.add_metric([batch_id, owner, "running"], running)
            per_batch.add_metric([batch_id, owner, "waiting"], waiting)
        yield per_batch
        running = sum(lines[1] for lines in batches.values())
        yield GaugeMetricFamily("gptoss_batch_lines_running", "Batch lines in the engine now", running)
        yield GaugeMetricFamily("gptoss_batches_unfinished", "Batches validating, in progress or ending", len(batches))


class _LiveState:
    """Gauges and engine/cache counters read when Prometheus scrapes, so they are never stale."""

    def __init__(
        self,
        scheduler: Scheduler,
        cache: CacheCounts | None,
        gpu: GpuMonitor | None,
        abandoned: Mapping[str, int],
        tool_calls: Mapping[str, int],
    ) -> None:
        self.scheduler, self.cache, self.gpu, self.abandoned = scheduler, cache, gpu, abandoned
        self.tool_calls = tool_calls

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[Metric]:
        snap = snapshot(self.scheduler)
        waiting = GaugeMetricFamily("gptoss_requests_waiting", "Requests waiting in the queue", labels=["priority"])
        for cls, count in snap.waiting.items():
            waiting.add_metric([cls.value], count)
        yield waiting
        idle = CounterMetricFamily(
            "gptoss_queue_idle_wait_seconds",
            "Seconds requests waited in the queue while "
            "the engine had room (free slots and tokens, admission not paused)",
            labels=["priority"],
        )
        for name, seconds in snap.idle_wait_s.items():
            idle.add_metric([name], seconds)
        yield idle
        yield CounterMetricFamily(
            "gptoss_slots_taken_back",
            "Slots running medium and low requests gave back, to a high or at the end of a burst (suspended, then resumed "
            "where they stopped)",
            snap.taken_back,
        )
        yield GaugeMetricFamily("gptoss_requests_running", "Requests running in the engine", snap.running)
        yield GaugeMetricFamily(
            "gptoss_concurrency_limit", "Requests the engine may run at once now (adaptive)", snap.limit
        )
        if snap.measured_tpot_s is not None:
            yield GaugeMetricFamily(
                "gptoss_measured_tpot_seconds",
                "Time per output token the running limit steers by, smoothed over control intervals",
                snap.measured_tpot_s,
            )
        yield GaugeMetricFamily(
            "gptoss_tpot_set_point_seconds",
            "Where the running limit keeps the measured "
            "TPOT: under the objective by the spread of finished requests' own TPOT",
            snap.tpot_set_point_s,
        )
        yield GaugeMetricFamily(
            "gptoss_queue_wait_recent_seconds",
            "Mean queue wait over the last pressure interval (admitted requests and current waiters)",
            snap.avg_wait_s,
        )
        yield GaugeMetricFamily("gptoss_emergency_mode", "1 while emergency mode is on", int(snap.emergency))
        yield GaugeMetricFamily(
            "gptoss_admission_paused", "1 while the memory guard pauses admissions", int(snap.admission_paused)
        )
        yield GaugeMetricFamily(
            "gptoss_token_budget_in_use", "Worst-case tokens of running requests", snap.tokens_in_use
        )
        yield from self._engine(snap)

    def _engine(self, snap: Snapshot) -> Iterator[Metric]:
        if (stats := snap.engine) is not None:
            yield GaugeMetricFamily(
                "gptoss_engine_kv_cache_usage_ratio", "Engine KV cache in use (0-1)", stats.kv_usage
            )
            yield CounterMetricFamily(
                "gptoss_generated_tokens", "Tokens generated by the engine", stats.generated_tokens
            )
        left = CounterMetricFamily(
            "gptoss_requests_abandoned",
            "Requests whose client left before the queue had "
            "them: while sending the body, or waiting on the cache or an identical "
            "request's answer",
            labels=["stage"],
        )
        for stage in ("body", "cache"):
            left.add_metric([stage], self.abandoned.get(stage, 0))
        yield left
        yield CounterMetricFamily("gptoss_tool_calls", "Tool calls in answers", self.tool_calls.get("made", 0))
        yield CounterMetricFamily(
            "gptoss_tool_call_parse_errors",
            "Output that looked like a tool call and did not parse (returned as content)",
            self.tool_calls.get("parse_errors", 0),
        )
        if self.cache is not None:
            yield CounterMetricFamily("gptoss_cache_hits", "Response cache hits", self.cache.hits)
            yield CounterMetricFamily("gptoss_cache_misses", "Response cache misses", self.cache.misses)
            yield from _similar(getattr(self.cache, "similar", None))
        yield from self._gpu()

    def _gpu(self) -> Iterator[Metric]:
        gpu = self.gpu
        if gpu is None:
            return
        used = GaugeMetricFamily("gptoss_gpu_memory_used_bytes", "GPU memory in use", labels=["device"])
        total = GaugeMetricFamily("gptoss_gpu_memory_total_bytes", "GPU memory in all", labels=["device"])
        for device in gpu.devices:
            used.add_metric([str(device.index)], device.used_bytes)
            total.add_metric([str(device.index)], device.total_bytes)
        yield used
        yield total
        yield CounterMetricFamily(
            "gptoss_memory_guard_switches", "Times the memory guard paused or resumed", gpu.guard.switches
        )


class _CallerUsage:
    """Per caller, labelled by name (never a key): the configured names, `anonymous` and the
    shorthand keys' digests bound the label set."""

    def __init__(self, usage: UsageLedger) -> None:
        self.usage = usage

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[Metric]:
        families = {
            "requests": CounterMetricFamily("gptoss_caller_requests", "Chat calls per caller", labels=["caller"]),
            "cache_hits": CounterMetricFamily(
                "gptoss_caller_cache_hits", "Calls answered from the cache", labels=["caller"]
            ),
            "rejections": CounterMetricFamily(
                "gptoss_caller_rejections", "Calls answered with an error", labels=["caller"]
            ),
            "queue_wait_s": CounterMetricFamily(
                "gptoss_caller_queue_wait_seconds", "Time spent waiting in the queue", labels=["caller"]
            ),
        }
        tokens = CounterMetricFamily(
            "gptoss_caller_tokens", "Tokens the engine served per caller", labels=["caller", "kind"]
        )
        for name, totals in sorted(self.usage.lifetime.items()):
            for field, family in families.items():
                family.add_metric([name], getattr(totals, field))
            tokens.add_metric([name, "prompt"], totals.prompt_tokens)
            tokens.add_metric([name, "completion"], totals.completion_tokens)
        yield from families.values()
        yield tokens


def _similar(similar: SimilarAnswers | None) -> Iterator[Metric]:
    """Similar-question hits apart from exact ones, the reports of wrong ones, and what the guards refused."""
    if similar is None:
        return
    yield CounterMetricFamily("gptoss_cache_similar_hits", "Answers reused for a similar request", similar.hits)
    yield CounterMetricFamily(
        "gptoss_cache_similar_false_hits",
        "Similar hits reported wrong (POST /v1/cache/feedback); each pairing is blocked",
        similar.false_hits,
    )
    refused = CounterMetricFamily(
        "gptoss_cache_similar_refused", "Candidates above the threshold a guard refused", labels=["guard"]
    )
    for guard, count in sorted(similar.index.refused.items()):
        refused.add_metric([guard], count)
    yield refused
