"""Which upstream server takes the next request: the least loaded of the healthy ones, by what each
reports (vLLM's running and waiting sequences, KV use) plus what we have in flight there, with an
optional pull towards the upstream that served the same prompt prefix (so vLLM's prefix cache
hits). Pure: readings in, choices out; the engine does the I/O."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

_SAMPLE = re.compile(r"^(vllm:[a-z_]+)(?:\{[^}]*\})?\s+([0-9.eE+-]+|NaN)\s*$", re.MULTILINE)
AFFINITY_SHARE = 0.125  # of its slots, the load a prefix's upstream may carry above the least loaded


@dataclass(slots=True)
class Upstream:
    url: str  # the OpenAI base URL, ending in /v1
    api_key: str = ""
    weight: float = 1.0
    healthy: bool = True
    failures: int = 0
    running: float = 0.0  # as last reported by the upstream
    waiting: float = 0.0
    kv_usage: float = 0.0
    in_flight: int = 0  # ours, counted as we send and finish
    served: int = 0
    tokenizes: bool = True  # serves /tokenize, until it answers 404
    tokenize_after: float = 0.0  # monotonic time before which /tokenize is not asked (it answered 429)

    @property
    def root(self) -> str:
        """The server root, where vLLM serves /metrics, /health and /tokenize."""
        return self.url.removesuffix("/").removesuffix("/v1")

    @property
    def load(self) -> float:
        """Sequences it holds, ours counted when its report lags behind, per unit of weight."""
        return (max(self.running + self.waiting, self.in_flight) + self.kv_usage) / self.weight


class UpstreamPool:
    def __init__(
        self, upstreams: list[Upstream], eject_after: int = 2, prefix_affinity: bool = True, slots: int = 128
    ) -> None:
        self.upstreams = upstreams
        self.eject_after = eject_after
        self.prefix_affinity = prefix_affinity
        self.slots = slots

    @property
    def healthy(self) -> list[Upstream]:
        return [u for u in self.upstreams if u.healthy]

    def pick(self, affinity: str = "", exclude: tuple[Upstream, ...] = ()) -> Upstream | None:
        candidates = [u for u in self.healthy if u not in exclude]
        if not candidates:
            return None
        least = min(candidates, key=lambda u: u.load)
        if not (self.prefix_affinity and affinity):
            return least
        preferred = max(candidates, key=lambda u: _rendezvous(affinity, u.url))
        slack = max(1.0, AFFINITY_SHARE * self.slots)
        roomy = preferred.load * preferred.weight + 1 <= self.slots  # a free slot: nothing waits there
        return preferred if roomy and preferred.load <= least.load + slack else least

    def failed(self, upstream: Upstream) -> bool:
        """A failed request or health check; True when this one took the upstream out."""
        upstream.failures += 1
        if upstream.healthy and upstream.failures >= self.eject_after:
            upstream.healthy = False
            return True
        return False

    def succeeded(self, upstream: Upstream) -> bool:
        """A good health check or request; True when this one brought the upstream back."""
        upstream.failures = 0
        if not upstream.healthy:
            upstream.healthy = True
            return True
        return False


def read_vllm_metrics(upstream: Upstream, text: str) -> None:
    """vLLM's /metrics (Prometheus text), summed over its label sets (one per model)."""
    totals: dict[str, float] = {}
    for name, value in _SAMPLE.findall(text):
        if value != "NaN":
            totals[name] = totals.get(name, 0.0) + float(value)
    upstream.running = totals.get("vllm:num_requests_running", 0.0)
    upstream.waiting = totals.get("vllm:num_requests_waiting", 0.0)
    upstream.kv_usage = totals.get("vllm:kv_cache_usage_perc", totals.get("vllm:gpu_cache_usage_perc", 0.0))


def _rendezvous(key: str, url: str) -> int:
    """Highest-random-weight hashing: a prefix keeps its upstream while the others come and go."""
    return int.from_bytes(hashlib.sha256(f"{key}|{url}".encode()).digest()[:8], "big")
