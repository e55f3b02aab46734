"""Read-only views of the scheduler for /v1/queue/status, the UI and the SSE queue notices."""

from __future__ import annotations

from dataclasses import asdict

from scheduler.loop import Scheduler
from scheduler.request import PriorityClass, RequestState


def overall_status(s: Scheduler) -> dict:
    now = s.clock()
    waiting = {c.value: s.queue.count(c) for c in PriorityClass}
    estimates = {}
    for c in PriorityClass:
        ahead = s.queue.count_ahead_of_new(s.pressure.weight(c, s.config.weights.of(c.value)), now)
        position = ahead + 1 if ahead or not s.admission.free_slots else 0
        estimates[c.value] = _round(s.estimated_wait_s(position))
    return {
        "object": "queue.status",
        "engine_ready": s.engine.ready,
        "waiting": waiting,
        "waiting_total": len(s.queue),
        "running": s.admission.running,
        "slots": s.admission.max_concurrency,
        "free_slots": s.admission.free_slots,
        "max_concurrency": s.limit.upper,
        "adaptive_limit": s.config.limit.adaptive,
        "measured_tpot_s": _round(s.limit.tpot_s, 4),
        "slo": {"tpot_s": s.config.slo.tpot_s, "ttft_s": s.config.slo.ttft_s},
        "token_budget": s.admission.token_budget,
        "tokens_in_use": s.admission.tokens_in_use,
        "max_queue_size": s.config.max_queue_size,
        "max_wait_s": {c.value: s.max_wait_s(c) for c in PriorityClass},
        "avg_wait_s": round(s.avg_wait_s(), 3),
        "estimated_wait_s": estimates,
        "emergency": s.pressure.emergency,
        "admission_paused": s.admission.paused,
        "engine": asdict(s.engine.stats()) if s.engine.ready else None,
    }


def request_status(s: Scheduler, request_id: str) -> dict:
    now = s.clock()
    ticket = s.ticket(request_id)
    if ticket is None:
        info = s.finished_info(request_id)
        if info is None:
            return {"request_id": request_id, "state": "unknown"}
        return {"request_id": request_id, "state": "finished", **info}
    request = ticket.request
    if request.state is RequestState.QUEUED:
        position = s.queue.position(request_id) or 0
        return {
            "request_id": request_id,
            "state": "queued",
            "position": position,
            "queue_length": len(s.queue),
            "priority": request.priority.value,
            "waited_s": round(now - request.arrival, 3),
            "estimated_wait_s": _round(s.estimated_wait_s(position)),
        }
    started = request.dispatched_at or now
    return {
        "request_id": request_id,
        "state": "running",
        "position": 0,
        "priority": request.priority.value,
        "waited_s": round(started - request.arrival, 3),
        "running_s": round(now - started, 3),
        "estimated_wait_s": 0.0,
    }


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)
