"""What bench/engine.py measures: the plan (rounds, requests per worker), the concurrencies and
requests, and one cell (one server at one concurrency in one round, with the CPU it cost), read by
the runner and by bench/engine_report.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.clients import StreamResult

CONCURRENCIES = (1, 4, 8)
MAX_TOKENS = 128
TEMPERATURE = 0.8


@dataclass
class Plan:
    rounds: int
    per_worker: dict[int, int]  # requests each worker sends in one cell, by concurrency


QUICK = Plan(rounds=3, per_worker={1: 2, 4: 2, 8: 2})
FULL = Plan(rounds=6, per_worker={1: 4, 4: 3, 8: 3})


@dataclass
class Cell:
    server: str
    concurrency: int
    round: int
    samples: list[StreamResult] = field(default_factory=list)
    wall_s: float = 0.0
    front_cpu_s: float = 0.0
    engine_cpu_s: float = 0.0
    idle_cpu_s: float = 0.0  # the other server, idle meanwhile
    client_cpu_s: float = 0.0
    foreign_cpu_s: float = 0.0  # everything else on the machine

    @property
    def ok(self) -> list[StreamResult]:
        return [s for s in self.samples if not s.error]

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.ok)

    @property
    def tok_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s else 0.0
