"""Fair share inside a class, as a pure policy: the Virtual Token Counter's choices on synthetic
queues, and each caller's running limit."""

from __future__ import annotations

from scheduler.caller_share import CallerShare
from scheduler.fair_share import VirtualTokenCounter
from scheduler.policy import FairOrder
from scheduler.queue import PriorityQueue
from scheduler.request import PriorityClass as P
from tests.scheduler.factory import make_request

FAIR = FairOrder()


def queue_of(*requests) -> PriorityQueue:
    queue = PriorityQueue(aging_per_s=0.25)
    for request in requests:
        queue.push(request)
    return queue


def drain_order(share: CallerShare, queue: PriorityQueue, output_tokens: int = 10) -> list[str]:
    """Run the queue one request at a time, each served in full before the next starts."""
    order = []
    while (request := FAIR.next_up(queue, share)) is not None:
        queue.remove(request.key)
        share.started(request)
        share.served(request.caller, output_tokens=output_tokens)
        share.ended(request)
        order.append(request.caller)
    return order


def scan_pick(vtc: VirtualTokenCounter, members: list, key) -> object:
    """The least-served caller's best request, by looking at every waiter: what the index must match."""
    best: dict = {}
    for request in members:
        if request.caller not in best or key(request) > key(best[request.caller]):
            best[request.caller] = request
    return best[min(best, key=lambda c: (vtc.of(c), -key(best[c])))] if best else None


def test_the_least_served_caller_goes_next_within_a_class():
    vtc = VirtualTokenCounter(input_weight=1, output_weight=2)
    vtc.charge("alice", prompt_tokens=100, output_tokens=100)  # 300
    vtc.charge("bob", prompt_tokens=10)  # 10
    queue = queue_of(make_request(arrival=0, caller="alice"), make_request(arrival=1, caller="bob"))
    assert FAIR.next_up(queue, CallerShare(vtc)).caller == "bob"
    assert vtc.of("alice") == 300 and vtc.of("bob") == 10


def test_a_flood_of_one_caller_is_interleaved_with_the_others():
    share = CallerShare(VirtualTokenCounter())
    flood = [make_request(arrival=i, caller="alice") for i in range(6)]
    light = [make_request(arrival=10 + i, caller="bob") for i in range(2)]
    queue = PriorityQueue(aging_per_s=0.25)
    for request in flood + light:
        share.joining(request, queue)
        queue.push(request)
        share.joined(request, queue)
    assert drain_order(share, queue) == ["alice", "bob", "alice", "bob", "alice", "alice", "alice", "alice"]


def test_fcfs_within_the_class_without_fair_share():
    share = CallerShare(None)
    queue = queue_of(
        *[make_request(arrival=i, caller="alice") for i in range(3)], make_request(arrival=9, caller="bob")
    )
    assert drain_order(share, queue) == ["alice", "alice", "alice", "bob"]


def test_the_class_order_and_aging_are_unchanged():
    vtc = VirtualTokenCounter()
    vtc.charge("alice", output_tokens=1000)
    share = CallerShare(vtc)
    low = make_request(P.LOW, arrival=0, caller="bob")
    high = make_request(P.HIGH, arrival=0, caller="alice")
    assert FAIR.next_up(queue_of(low, high), share) is high  # the least served waits for a higher class
    aged = make_request(P.LOW, arrival=-100, caller="bob")  # aged past a fresh high
    assert FAIR.next_up(queue_of(aged, high), share) is aged


def test_a_returning_caller_is_lifted_to_the_least_served_waiter():
    vtc = VirtualTokenCounter()
    vtc.charge("alice", output_tokens=500)  # 1000
    vtc.charge("carol", output_tokens=400)  # 800
    vtc.arrive("bob", waiting=["alice", "carol"])
    assert vtc.of("bob") == 800  # no credit banked while idle
    vtc.arrive("alice", waiting=["carol", "bob"])
    assert vtc.of("alice") == 1000  # never lowered


def test_within_a_caller_its_best_request_goes_first():
    share = CallerShare(VirtualTokenCounter())
    plain = make_request(arrival=0, caller="alice")
    short = make_request(arrival=1, caller="alice", score=7.5)  # the short-request bonus
    assert FAIR.next_up(queue_of(plain, short), share) is short


def test_a_caller_at_its_running_limit_is_skipped_not_blocking():
    share = CallerShare(VirtualTokenCounter())
    running = make_request(caller="alice", max_parallel=1)
    share.started(running)
    waiting = make_request(P.HIGH, arrival=0, caller="alice", max_parallel=1)
    other = make_request(P.LOW, arrival=5, caller="bob")
    queue = queue_of(waiting, other)
    assert FAIR.next_up(queue, share) is other
    share.ended(running)
    assert FAIR.next_up(queue, share) is waiting


def test_positions_follow_the_fair_order():
    vtc = VirtualTokenCounter()
    share = CallerShare(vtc)
    requests = [make_request(arrival=i, caller="alice") for i in range(4)] + [make_request(arrival=9, caller="bob")]
    vtc.charge("alice", output_tokens=50)
    queue = queue_of(*requests)
    assert share.position(queue, requests[-1].key) == 1
    assert [share.position(queue, r.key) for r in requests[:4]] == [2, 3, 4, 5]
    assert CallerShare(None).position(queue, requests[-1].key) == 5


def test_a_newcomer_counts_the_rounds_ahead_of_it():
    vtc = VirtualTokenCounter()
    members = [make_request(caller="alice") for _ in range(10)] + [make_request(caller="bob")]
    assert vtc.ahead_in_class("carol", members) == 2  # one of alice's, one of bob's
    assert vtc.ahead_in_class("bob", members) == 1 + 2  # its own, then a round of alice's


def test_in_a_full_queue_a_light_caller_takes_the_heaviest_callers_newest_place():
    share = CallerShare(VirtualTokenCounter())
    flood = [make_request(arrival=i, caller="alice") for i in range(5)]
    queue = queue_of(*flood, make_request(arrival=6, caller="bob"))
    assert share.displaced_by(make_request(arrival=9, caller="bob"), queue) is flood[-1]
    assert share.displaced_by(make_request(arrival=9, caller="alice"), queue) is None  # the heaviest waits its turn
    even = queue_of(make_request(caller="alice"), make_request(caller="bob"))
    assert share.displaced_by(make_request(caller="bob"), even) is None  # one place apart: nobody is crowded out
    assert CallerShare(None).displaced_by(make_request(caller="bob"), queue) is None
    assert share.displaced_by(make_request(P.LOW, caller="bob"), queue) is None  # only within the class


def test_positions_are_worked_out_once_per_change_of_the_queue():
    vtc = VirtualTokenCounter()
    share = CallerShare(vtc)
    a, b = make_request(arrival=0, caller="alice"), make_request(arrival=1, caller="bob")
    queue = queue_of(a, b)
    assert share.position(queue, a.key) == 1
    vtc.charge("alice", output_tokens=100)
    assert share.position(queue, a.key) == 1  # counters alone do not reorder what is shown
    queue.push(make_request(arrival=2, caller="carol"))
    assert [share.position(queue, r.key) for r in (a, b)] == [3, 1]


def test_the_heap_index_picks_what_a_scan_of_the_class_would():
    """Random arrivals, departures, charges and running limits: the O(log n) index and a full
    scan of the class's waiters agree on every pick."""
    import random

    from scheduler.fair_index import FairIndex

    rng = random.Random(7)
    vtc = VirtualTokenCounter()
    queue = PriorityQueue(aging_per_s=0.25)
    index = FairIndex(vtc, queue)
    callers = [f"c{i}" for i in range(6)]
    for step in range(3000):
        roll = rng.random()
        if roll < 0.45:
            joining = make_request(
                rng.choice(list(P)),
                arrival=step * 0.01,
                caller=rng.choice(callers),
                score=rng.choice([1.0, 3.5, 5.0, 7.5, 10.0]),
            )
            queue.push(joining)
            index.add(joining)
        elif roll < 0.6 and len(queue):
            queue.remove(rng.choice(list(queue)).key)
        elif roll < 0.8:
            vtc.charge(rng.choice(callers), output_tokens=rng.randint(0, 50))
        blocked = set(rng.sample(callers, rng.randint(0, 2)))
        for cls in P:
            members = [r for r in queue.members(cls) if r.caller not in blocked]
            expected = scan_pick(vtc, members, queue.key)
            assert index.pick(cls, lambda r: r.caller not in blocked) is expected, step  # noqa: B023
