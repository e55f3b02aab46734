"""GPU memory: the guard's hysteresis, the sampling thread pausing a real scheduler, and the HTTP view."""

from __future__ import annotations

import asyncio
import logging
import shutil
import time

import pytest

from core.types import Delta
from engine.sim import SimEngine
from monitor.gpu import GpuMonitor, GpuUnavailable, MemoryGuard, NvmlReader
from scheduler.loop import Scheduler
from scheduler.request import Dispatched, RequestState, SchedulerError
from settings.schema import SchedulerConfig, SimConfig
from tests.monitor.helpers import FakeReader, Scrape, chat, device, in_thread, joined, poll_metrics
from tests.scheduler.factory import make_request


@pytest.fixture
def monitor_logs(caplog, monkeypatch):
    """configure_logging stops propagation at gpt_oss_webui; caplog listens at the root."""
    monkeypatch.setattr(logging.getLogger("gpt_oss_webui"), "propagate", True)
    caplog.set_level(logging.INFO, logger="gpt_oss_webui.monitor")
    return caplog


def test_guard_pauses_above_high_on_any_device_and_resumes_below_resume_on_all():
    guard = MemoryGuard(high_pct=90, resume_pct=80)
    assert guard.update([device(0, 50), device(1, 89.9)]) is False and not guard.paused
    assert guard.update([device(0, 90), device(1, 90)]) is False and not guard.paused  # at the limit is fine
    assert guard.update([device(0, 50), device(1, 91)]) is True and guard.paused
    assert guard.update([device(0, 50), device(1, 95)]) is False and guard.paused
    assert guard.update([device(0, 50), device(1, 85)]) is False and guard.paused  # between: stays paused
    assert guard.update([device(0, 81), device(1, 79)]) is False and guard.paused  # one device still above
    assert guard.update([device(0, 80), device(1, 10)]) is False and guard.paused  # resume needs below 80
    assert guard.switches == 1
    assert guard.update([device(0, 79.9), device(1, 10)]) is True and not guard.paused
    assert guard.update([device(0, 85)]) is False and not guard.paused  # between: stays running
    assert guard.update([device(0, 100)]) is True and guard.paused
    assert guard.switches == 3
    assert guard.update([]) is True and not guard.paused  # no device reads as no pressure
    assert device(0, 0, total=0).used_pct == 0.0


async def _until(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def _drain(ticket) -> list:
    out = []
    while True:
        event = await asyncio.wait_for(ticket.events.get(), 10)
        out.append(event)
        if isinstance(event, SchedulerError) or (isinstance(event, Delta) and event.finish_reason):
            return out


async def test_monitor_pauses_and_resumes_a_real_scheduler():
    engine = SimEngine(SimConfig(token_latency_ms=10, prefill_ms_per_token=0, natural_stop=False))
    await engine.start()
    sched = Scheduler(SchedulerConfig(max_concurrency=4, max_queue_size=10), engine)
    await sched.start()
    reader = FakeReader(50, 60)
    monitor = GpuMonitor(lambda: reader, MemoryGuard(90, 80), 0.02, sched.set_admission_paused)
    monitor.start(asyncio.get_running_loop())
    try:
        await _until(lambda: len(monitor.devices) == 2)
        running = sched.submit(make_request(max_tokens=60))  # ~0.6 s in the engine
        assert running.request.state is RequestState.RUNNING
        reader.set(50, 95)
        await _until(lambda: sched.admission.paused)
        queued = [sched.submit(make_request(max_tokens=3)) for _ in range(3)]
        reader.set(50, 85)  # below high but above resume: still paused
        reads = reader.reads
        await _until(lambda: reader.reads >= reads + 5)
        assert sched.admission.paused and len(sched.queue) == 3 and sched.admission.running == 1
        assert all(t.request.state is RequestState.QUEUED for t in queued)
        first = await _drain(running)  # what runs keeps running to its end
        assert first[-1].finish_reason == "length" and sum(e.num_tokens for e in first if isinstance(e, Delta)) == 60
        assert len(sched.queue) == 3 and sched.admission.running == 0  # a free slot does not admit while paused
        reader.set(10, 10)
        for ticket in queued:
            events = await _drain(ticket)
            assert isinstance(events[0], Dispatched) and events[0].queue_wait_s > 0.3
            assert events[-1].finish_reason == "length"
        assert not sched.admission.paused and monitor.guard.switches == 2
        assert [sched.finished_info(t.key)["outcome"] for t in queued] == ["finish"] * 3
    finally:
        monitor.stop()
        await sched.shutdown()
        await engine.stop()
    assert not monitor._thread.is_alive()


async def test_an_empty_reading_while_paused_resumes_admissions(monitor_logs):
    engine = SimEngine(SimConfig(token_latency_ms=1, prefill_ms_per_token=0, natural_stop=False))
    await engine.start()
    sched = Scheduler(SchedulerConfig(max_concurrency=2), engine)
    await sched.start()
    reader = FakeReader(99)
    monitor = GpuMonitor(lambda: reader, MemoryGuard(90, 80), 0.02, sched.set_admission_paused)
    monitor.start(asyncio.get_running_loop())
    try:
        await _until(lambda: sched.admission.paused)
        ticket = sched.submit(make_request(max_tokens=2))
        reader.set()  # the reader sees no device any more
        events = await _drain(ticket)
        assert events[-1].finish_reason == "length" and not sched.admission.paused
        assert monitor._thread.is_alive()
    finally:
        monitor.stop()
        await sched.shutdown()
        await engine.stop()


async def test_a_failing_reading_is_logged_and_sampling_goes_on(monitor_logs):
    class Flaky(FakeReader):
        def read(self):
            if self.reads == 0:
                self.reads += 1
                raise RuntimeError("NVML hiccup")
            return super().read()

    reader = Flaky(50)
    switches = []
    monitor = GpuMonitor(lambda: reader, MemoryGuard(90, 80), 0.02, switches.append)
    monitor.start(asyncio.get_running_loop())
    try:
        await _until(lambda: monitor.devices)
    finally:
        monitor.stop()
    assert any("GPU memory reading failed: NVML hiccup" in r.getMessage() for r in monitor_logs.records)
    assert switches == []


async def test_without_a_gpu_the_monitor_logs_once_and_does_nothing(monitor_logs):
    calls = []

    def factory():
        calls.append(1)
        raise GpuUnavailable("NVML Shared Library Not Found")

    switches = []
    monitor = GpuMonitor(factory, MemoryGuard(90, 80), 0.05, switches.append)
    monitor.start(asyncio.get_running_loop())
    await asyncio.sleep(0.2)
    monitor.stop()
    assert monitor.unavailable == "NVML Shared Library Not Found"
    assert calls == [1] and monitor._thread is None and monitor.devices == [] and switches == []
    records = [r for r in monitor_logs.records if r.name.startswith("gpt_oss_webui")]
    assert [(r.levelno, r.name) for r in records] == [(logging.INFO, "gpt_oss_webui.monitor")]
    assert "unavailable" in records[0].getMessage() and "NVML Shared Library Not Found" in records[0].getMessage()


def test_nvml_reader_without_a_gpu_raises_gpu_unavailable():
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has an NVIDIA driver")
    with pytest.raises(GpuUnavailable):
        NvmlReader()


def test_memory_guard_over_http(make_server):
    reader = FakeReader(40, 50)

    def prepare(services):
        services.gpu = GpuMonitor(lambda: reader, MemoryGuard(90, 80), 0.05, services.scheduler.set_admission_paused)

    live = make_server("monitor.gpu=true", "scheduler.max_concurrency=2", prepare=prepare)
    scrape = poll_metrics(live.url, lambda m: m.value("gptoss_gpu_memory_used_bytes", device="1") is not None)
    assert scrape.get("gptoss_gpu_memory_used_bytes", device="0") == device(0, 40).used_bytes
    assert scrape.get("gptoss_gpu_memory_total_bytes", device="0") == device(0, 40).total_bytes
    assert scrape.get("gptoss_gpu_memory_used_bytes", device="1") == device(1, 50).used_bytes
    assert scrape.get("gptoss_admission_paused") == 0 and scrape.get("gptoss_memory_guard_switches_total") == 0
    assert live.status()["admission_paused"] is False

    reader.set(40, 96)
    scrape = poll_metrics(live.url, lambda m: m.get("gptoss_admission_paused") == 1)
    assert scrape.get("gptoss_gpu_memory_used_bytes", device="1") == device(1, 96).used_bytes
    assert scrape.get("gptoss_memory_guard_switches_total") == 1
    assert live.status()["admission_paused"] is True
    waiting = in_thread(chat, live.url, max_tokens=3)
    live.wait_for(lambda s: s["waiting_total"] == 1 and s["running"] == 0)
    time.sleep(0.3)
    status = live.status()
    assert status["waiting_total"] == 1 and status["running"] == 0 and "result" not in waiting

    reader.set(40, 70)
    response = joined(waiting)
    assert response.status_code == 200 and int(response.headers["x-queue-wait-ms"]) >= 300
    scrape = Scrape(live.url)
    assert scrape.get("gptoss_admission_paused") == 0 and scrape.get("gptoss_memory_guard_switches_total") == 2
    assert live.status()["admission_paused"] is False
    assert chat(live.url, max_tokens=2).status_code == 200
