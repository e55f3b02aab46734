from scheduler.queue import PriorityQueue
from scheduler.request import PriorityClass as P
from scheduler.request import RequestKey
from tests.scheduler.factory import make_request


def key(request_id: str) -> RequestKey:
    return RequestKey("anonymous", request_id)


def drain(queue: PriorityQueue) -> list[str]:
    out = []
    while (r := queue.pop()) is not None:
        out.append(r.request_id)
    return out


def test_orders_by_score_then_arrival():
    q = PriorityQueue(aging_per_s=0.0)
    for rid, cls in [("l1", P.LOW), ("m1", P.MEDIUM), ("h1", P.HIGH), ("m2", P.MEDIUM), ("h2", P.HIGH)]:
        q.push(make_request(cls, request_id=rid))
    assert drain(q) == ["h1", "h2", "m1", "m2", "l1"]


def test_ties_are_fifo_even_with_equal_arrival_times():
    q = PriorityQueue(aging_per_s=0.25)
    for i in range(50):
        q.push(make_request(P.MEDIUM, arrival=5.0, request_id=f"m{i}"))
    assert drain(q) == [f"m{i}" for i in range(50)]


def test_aging_lets_an_old_low_request_outrank_a_fresh_high_one():
    q = PriorityQueue(aging_per_s=0.25)
    # low=1 outranks a fresh high=10 after (10 - 1) / 0.25 = 36 s
    q.push(make_request(P.LOW, arrival=0.0, request_id="old-low"))
    q.push(make_request(P.HIGH, arrival=35.0, request_id="high-35"))
    q.push(make_request(P.HIGH, arrival=37.0, request_id="high-37"))
    assert drain(q) == ["high-35", "old-low", "high-37"]
    low = make_request(P.LOW, arrival=0.0)
    assert q.effective_score(low, now=36.0) == 10.0


def test_remove_and_positions():
    q = PriorityQueue(aging_per_s=0.0)
    reqs = [
        make_request(P.LOW, request_id="a"),
        make_request(P.HIGH, request_id="b"),
        make_request(P.MEDIUM, request_id="c"),
    ]
    for r in reqs:
        q.push(r)
    assert [r.request_id for r in q.ranked()] == ["b", "c", "a"]
    assert q.remove(key("b")).request_id == "b"
    assert q.remove(key("b")) is None
    assert [r.request_id for r in q.ranked()] == ["c", "a"] and q.get(key("b")) is None
    assert len(q) == 2 and key("b") not in q
    assert drain(q) == ["c", "a"]


def test_removed_entries_are_compacted_away():
    q = PriorityQueue(aging_per_s=0.0)
    for i in range(500):
        q.push(make_request(P.MEDIUM, request_id=f"x{i}"))
    for i in range(490):
        q.remove(key(f"x{i}"))
    assert len(q._heap) < 100
    assert drain(q) == [f"x{i}" for i in range(490, 500)]


def test_newest_below_picks_the_newest_of_the_lowest_class_that_may_be_taken():
    q = PriorityQueue(aging_per_s=0.0)
    for rid, cls, t in [("m1", P.MEDIUM, 1), ("l1", P.LOW, 2), ("l2", P.LOW, 3), ("m2", P.MEDIUM, 4)]:
        q.push(make_request(cls, arrival=t, request_id=rid))
    anyone = lambda r: True  # noqa: E731
    assert q.newest_below(P.HIGH, anyone).request_id == "l2"
    assert q.newest_below(P.HIGH, lambda r: r.request_id != "l2").request_id == "l1"
    assert q.newest_below(P.HIGH, lambda r: r.request_id == "m1").request_id == "m1"  # no low may go
    assert q.newest_below(P.LOW, anyone) is None
    q.remove(key("l1")), q.remove(key("l2"))
    assert q.newest_below(P.HIGH, anyone).request_id == "m2"
    assert q.newest_below(P.MEDIUM, anyone) is None


def test_expired_uses_each_class_limit():
    q = PriorityQueue(aging_per_s=0.0)
    for rid, cls, t in [("l-old", P.LOW, 0), ("l-new", P.LOW, 50), ("m-old", P.MEDIUM, 0), ("h-old", P.HIGH, 0)]:
        q.push(make_request(cls, arrival=t, request_id=rid))
    limits = {P.HIGH: 300, P.MEDIUM: 60, P.LOW: 60}
    assert {r.request_id for r in q.expired(now=61, max_wait_s=limits.__getitem__)} == {"l-old", "m-old"}
    assert q.expired(now=59, max_wait_s=limits.__getitem__) == []


def test_count_ahead_of_new_respects_fifo_and_aging():
    q = PriorityQueue(aging_per_s=0.25)
    q.push(make_request(P.HIGH, arrival=0))
    q.push(make_request(P.MEDIUM, arrival=0))
    q.push(make_request(P.LOW, arrival=0))
    assert q.count_ahead_of_new(10.0, now=0) == 1  # behind the equal high that came first
    assert q.count_ahead_of_new(1.0, now=0) == 3
    assert q.count_ahead_of_new(10.0, now=30) == 2  # the medium has aged past a fresh high
