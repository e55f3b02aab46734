"""GPU memory: readings through NVML, sampled in a background thread, and the guard policy that
pauses admissions before memory runs out."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("gpt_oss_webui.monitor")


@dataclass(slots=True, frozen=True)
class DeviceMemory:
    index: int
    name: str
    used_bytes: int
    total_bytes: int
    utilization_pct: float

    @property
    def used_pct(self) -> float:
        return 100.0 * self.used_bytes / self.total_bytes if self.total_bytes else 0.0


class GpuUnavailable(RuntimeError):
    pass


class MemoryReader(Protocol):
    def read(self) -> list[DeviceMemory]: ...


class NvmlReader:
    """pynvml (nvidia-ml-py), imported only here; raises GpuUnavailable without a driver or GPU."""

    def __init__(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception as exc:  # ImportError, NVMLError (no driver, no library)
            raise GpuUnavailable(str(exc) or type(exc).__name__) from None
        if not self._handles:
            raise GpuUnavailable("NVML reports no GPU")

    def read(self) -> list[DeviceMemory]:
        out = []
        for i, handle in enumerate(self._handles):
            memory = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            util = self._nvml.nvmlDeviceGetUtilizationRates(handle)
            name = self._nvml.nvmlDeviceGetName(handle)
            out.append(
                DeviceMemory(
                    i, name if isinstance(name, str) else name.decode(), memory.used, memory.total, float(util.gpu)
                )
            )
        return out


class MemoryGuard:
    """Pure hysteresis: pause above `high_pct` on any device, resume once all are below `resume_pct`."""

    def __init__(self, high_pct: float, resume_pct: float) -> None:
        self.high_pct = high_pct
        self.resume_pct = resume_pct
        self.paused = False
        self.switches = 0

    def update(self, devices: list[DeviceMemory]) -> bool:
        """True when the state switched."""
        worst = max((d.used_pct for d in devices), default=0.0)
        paused = worst > self.high_pct if not self.paused else worst >= self.resume_pct
        if paused == self.paused:
            return False
        self.paused = paused
        self.switches += 1
        return True


class GpuMonitor:
    """Samples a reader every `interval_s` in a thread; hands guard switches to the event loop."""

    def __init__(
        self,
        reader_factory: Callable[[], MemoryReader],
        guard: MemoryGuard,
        interval_s: float,
        on_switch: Callable[[bool], None],
    ) -> None:
        self._reader_factory = reader_factory
        self.guard = guard
        self.interval_s = interval_s
        self._on_switch = on_switch
        self.devices: list[DeviceMemory] = []
        self.unavailable: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            reader = self._reader_factory()
        except GpuUnavailable as exc:
            self.unavailable = str(exc)
            log.info("GPU memory guard unavailable (%s); admissions are not guarded by GPU memory", exc)
            return
        self._thread = threading.Thread(
            target=self._sample_forever, args=(reader, loop), name="gpu-monitor", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _sample_forever(self, reader: MemoryReader, loop: asyncio.AbstractEventLoop) -> None:
        while not self._stop.is_set():
            try:
                self.devices = reader.read()
            except Exception as exc:
                log.warning("GPU memory reading failed: %s", exc)
            else:
                if self.guard.update(self.devices):
                    worst = max((d.used_pct for d in self.devices), default=0.0)
                    state = "pausing" if self.guard.paused else "resuming"
                    log.warning("GPU memory at %.1f%%: %s admissions", worst, state)
                    loop.call_soon_threadsafe(self._on_switch, self.guard.paused)
            self._stop.wait(self.interval_s)
