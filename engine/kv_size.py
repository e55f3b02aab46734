"""How much memory the KV cache gets on the CPU when the config leaves it to us.

The KV cache bounds how many sequences can run at once, so a fixed small size wastes a large
machine and a share of total memory can starve a small one: a share of what is free now, kept
between a floor and a cap.
"""

from __future__ import annotations

from pathlib import Path

MIB = 2**20
SHARE = 0.1
FLOOR_BYTES = 256 * MIB
CAP_BYTES = 4096 * MIB


def available_bytes(meminfo: str | None = None) -> int | None:
    """MemAvailable from /proc/meminfo; None where there is no such file."""
    try:
        text = meminfo if meminfo is not None else Path("/proc/meminfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def default_cpu_kv_bytes(available: int | None = None) -> int:
    """A tenth of the memory available now, between 256 MiB and 4 GiB, in whole MiB."""
    free = available if available is not None else available_bytes()
    if free is None:
        return FLOOR_BYTES
    share = int(free * SHARE) // MIB * MIB
    return max(FLOOR_BYTES, min(CAP_BYTES, share))
