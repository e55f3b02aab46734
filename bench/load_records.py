"""What bench/load.py records and bench/load_report.py reads: one request as the client saw it
(`Record`), one sample of the server every second (`Sample`), one load level on one server (`Run`).
Its own module so that the runner and the report both depend on it and not on each other."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.clients import StreamResult
from bench.load_requests import Planned


@dataclass
class Record:
    """One request as the client saw it; times in seconds (None where it never happened)."""

    index: int
    cls: str
    planned_s: float
    sent_s: float
    status: int
    retry_after: bool  # a Retry-After header came with a non-200 answer
    error_kind: str  # "" or http / stream / transport / timeout / incomplete (see bench.clients.StreamResult)
    error: str
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    completion_tokens: int | None
    queue_wait_ms: float | None  # ours only
    notice_s: float | None = None  # ours: the first queue notice came this long after sending
    eta_s: float | None = None  # ...telling this wait (None: "unknown" or no notice)
    waited_after_notice_s: float | None = None  # ...and the request then waited this long


@dataclass
class Sample:
    t_s: float
    alive: bool
    rss_bytes: int
    waiting: int | None = None
    running: int | None = None
    concurrency_limit: int | None = None
    measured_tpot_s: float | None = None
    tpot_set_point_s: float | None = None
    max_queue_size: int | None = None
    idle_wait_s: dict[str, float] | None = (
        None  # ours: seconds waited while the engine had room, per class, since start
    )
    taken_back: int | None = None  # ours: slots lower requests gave back (suspended), since start


@dataclass
class Run:
    server: str
    load: float
    rate: float  # offered req/s: load x c_slo
    duration_s: float
    c_slo: float  # from the calibration just before this run (or --capacity)
    records: list[Record] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    crashed: bool = False
    stalls_s: list[float] = field(default_factory=list)  # the machine's, not the server's: bench.machine.machine_stalls


_HIGH_ALONE = ", high alone"


def high_alone(server: str) -> str:
    """The name of a run of only a level's high requests on `server` (bench/load.py --high-alone)."""
    return server + _HIGH_ALONE


def mixed(runs: list[Run]) -> list[Run]:
    """The runs of the whole plan: high-alone runs are a reference for one target, not a server."""
    return [r for r in runs if not r.server.endswith(_HIGH_ALONE)]


def to_record(p: Planned, r: StreamResult, t0: float) -> Record:
    """A client's result as a record, times from the run's start `t0`."""

    def opt(x: float) -> float | None:
        return None if x != x else x  # nan -> None (JSON has no NaN)

    header_wait = r.headers.get("x-queue-wait-ms")
    # A stream that opened while still queued carries the wait so far in its header and the full
    # wait in a `: dispatched queue_wait_ms=N` comment: the comment wins.
    wait = r.dispatched_wait_ms if r.dispatched_wait_ms is not None else (float(header_wait) if header_wait else None)
    return Record(
        p.index,
        p.cls,
        p.at_s,
        r.sent - t0,
        r.status,
        r.status != 200 and "retry-after" in r.headers,
        r.error_kind,
        r.error,
        opt(r.ttft_s),
        opt(r.tpot_s),
        opt(r.e2e_s),
        r.completion_tokens,
        wait,
        None if r.first_notice is None else r.first_notice - r.sent,
        r.first_eta_s,
        None if r.first_notice is None or r.dispatched is None else r.dispatched - r.first_notice,
    )
