"""Request ids are each caller's own: the scheduler's index is keyed by (caller, id)."""

from __future__ import annotations

import pytest

from core.types import Delta
from scheduler.engine_ids import EngineIds
from scheduler.outcome import Outcome
from scheduler.request import PriorityClass as P
from scheduler.request import RequestKey, SchedulerError
from scheduler.status import request_status
from tests.scheduler.factory import make_request
from tests.scheduler.test_loop import events_until_done, started, stop


async def test_two_callers_run_the_same_id_at_once() -> None:
    sched = await started(slots=2, latency_ms=5)
    alice = sched.submit(make_request(request_id="job-1", caller="alice", max_tokens=3))
    bob = sched.submit(make_request(request_id="job-1", caller="bob", max_tokens=3))
    assert (alice.request.engine_id, bob.request.engine_id) == ("job-1", "job-1:1")  # the engine runs each once
    for ticket in (alice, bob):
        last = (await events_until_done(ticket))[-1]
        assert isinstance(last, Delta) and last.finish_reason
    assert sched.finished_info(RequestKey("alice", "job-1"))["caller"] == "alice"
    assert sched.finished_info(RequestKey("bob", "job-1"))["caller"] == "bob"
    assert sched.finished_info(RequestKey("carol", "job-1")) is None
    await stop(sched)


async def test_a_callers_own_live_id_is_still_refused() -> None:
    sched = await started(slots=1, latency_ms=20)
    sched.submit(make_request(request_id="job-1", caller="alice", max_tokens=2))
    with pytest.raises(SchedulerError) as err:
        sched.submit(make_request(request_id="job-1", caller="alice"))
    assert err.value.kind is Outcome.DUPLICATE_ID
    sched.submit(make_request(request_id="job-1", caller="bob", max_tokens=2))
    await stop(sched)


async def test_status_tells_nothing_of_another_callers_id() -> None:
    sched = await started(slots=1, latency_ms=20)
    sched.submit(make_request(max_tokens=50, caller="alice", request_id="blocker"))
    sched.submit(make_request(P.LOW, caller="alice", request_id="job-1"))
    assert request_status(sched, RequestKey("bob", "job-1")) == {"request_id": "job-1", "state": "unknown"}
    assert request_status(sched, RequestKey("bob", "blocker")) == {"request_id": "blocker", "state": "unknown"}
    mine = request_status(sched, RequestKey("alice", "job-1"))
    assert (mine["request_id"], mine["state"], mine["caller"], mine["position"]) == ("job-1", "queued", "alice", 1)
    assert request_status(sched, RequestKey("alice", "blocker"))["state"] == "running"
    await stop(sched)


async def test_cancel_drops_only_its_own_ticket() -> None:
    sched = await started(slots=1, latency_ms=20)
    sched.submit(make_request(max_tokens=50, caller="alice", request_id="blocker"))
    alice = sched.submit(make_request(caller="alice", request_id="job-1"))
    bob = sched.submit(make_request(caller="bob", request_id="job-1"))
    sched.cancel(bob)
    assert (await bob.events.get()).kind is Outcome.DISCONNECT
    assert alice.key in sched.queue and bob.key not in sched.queue
    sched.cancel(alice)
    again = sched.submit(make_request(caller="alice", request_id="job-1"))
    sched.cancel(alice)  # the first one ended: its caller's new request with the same id stays
    assert again.key in sched.queue and sched.ticket(again.key) is again
    await stop(sched)


def test_engine_ids_are_the_clients_own_unless_taken() -> None:
    ids = EngineIds()
    assert ids.take("x:2") == "x:2"  # a client may send a numbered id itself
    assert [ids.take("x"), ids.take("x"), ids.take("x")] == ["x", "x:1", "x:3"]
    ids.drop("x")
    assert ids.take("x") == "x" and "x:3" in ids
    assert len(ids.take("y" * 128)) <= 128 and len(ids.take("y" * 128)) <= 128
