"""/v1/queue/status: the scheduler's snapshot as JSON, and one request's place in the queue."""

from __future__ import annotations

from dataclasses import asdict

from scheduler.loop import Scheduler
from scheduler.request import RequestKey, RequestState
from scheduler.snapshot import Snapshot


def overall_status(snap: Snapshot) -> dict:
    return {
        "object": "queue.status",
        "engine_ready": snap.engine_ready,
        "waiting": {c.value: n for c, n in snap.waiting.items()},
        "waiting_total": snap.waiting_total,
        "running": snap.running,
        "slots": snap.limit,
        "unbounded": snap.unbounded,
        "background_fill": snap.background_fill,
        "free_slots": snap.free_slots,
        "max_concurrency": snap.max_concurrency,
        "adaptive_limit": snap.adaptive,
        "measured_tpot_s": _round(snap.measured_tpot_s, 4),
        "tpot_set_point_s": round(snap.tpot_set_point_s, 4),
        "slo": {"tpot_s": snap.slo_tpot_s, "ttft_s": snap.slo_ttft_s},
        "token_budget": snap.token_budget,
        "tokens_in_use": snap.tokens_in_use,
        "lower_prefills": snap.lower_prefills,
        "burst_prefills": snap.burst_prefills,
        "max_queue_size": snap.max_queue_size,
        "max_wait_s": snap.max_wait_s.as_dict(),
        "avg_wait_s": round(snap.avg_wait_s, 3),
        "estimated_wait_s": {c: _round(v) for c, v in snap.estimated_wait_s.as_dict().items()},
        "emergency": snap.emergency,
        "admission_paused": snap.admission_paused,
        "engine": asdict(snap.engine) if snap.engine is not None else None,
        "idle_wait_s": {c: round(v, 3) for c, v in snap.idle_wait_s.items()},
        "taken_back": snap.taken_back,
    }


def request_status(s: Scheduler, key: RequestKey) -> dict:
    """One request of one caller. Another caller's request with the same id is `unknown`, exactly as
    an id never sent: its existence is not told. The id shown is the client's own."""
    now = s.clock()
    request_id = key.request_id
    ticket = s.ticket(key)
    if ticket is None:
        info = s.finished_info(key)
        if info is None:
            return {"request_id": request_id, "state": "unknown"}
        return {"request_id": request_id, "state": "finished", **info}
    request = ticket.request
    if request.state is RequestState.QUEUED:
        position = s.position(key) or 0
        return {
            "request_id": request_id,
            "state": "queued",
            "position": position,
            "queue_length": len(s.queue),
            "priority": request.priority.value,
            "caller": request.caller,
            "waited_s": round(now - request.arrival, 3),
            "estimated_wait_s": _round(s.estimated_wait_s(position, request.priority)),
        }
    started = request.dispatched_at or now
    return {
        "request_id": request_id,
        "state": "running",
        "position": 0,
        "priority": request.priority.value,
        "caller": request.caller,
        "waited_s": round(started - request.arrival, 3),
        "running_s": round(now - started, 3),
        "estimated_wait_s": 0.0,
    }


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)
