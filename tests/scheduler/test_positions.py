"""Queue positions under churn: re-ranked at most once per a size-proportional interval, with
newcomers placed by bisecting the last ranking."""

from __future__ import annotations

from scheduler.positions import RANK_S_PER_WAITER, QueuePositions
from scheduler.queue import PriorityQueue
from scheduler.request import PriorityClass as P
from tests.scheduler.factory import make_request


def filled(n: int) -> tuple[PriorityQueue, list]:
    queue = PriorityQueue(aging_per_s=0.0)
    requests = [make_request(P.MEDIUM, arrival=i) for i in range(n)]
    for request in requests:
        queue.push(request)
    return queue, requests


def test_churn_inside_the_interval_keeps_the_last_ranking_and_places_newcomers_by_their_key():
    queue, requests = filled(1000)
    positions = QueuePositions(None)
    assert positions.of(queue, requests[10].key, now=0.0) == 11
    queue.remove(requests[0].key)
    high, low = make_request(P.HIGH, arrival=2000), make_request(P.LOW, arrival=2000)
    queue.push(high)
    queue.push(low)
    soon = 0.5 * 1000 * RANK_S_PER_WAITER
    assert positions.of(queue, requests[10].key, now=soon) == 11  # not re-ranked yet
    assert positions.of(queue, high.key, now=soon) == 1
    assert positions.of(queue, low.key, now=soon) == len(queue)
    later = 1.01 * 1001 * RANK_S_PER_WAITER
    assert positions.of(queue, requests[10].key, now=later) == 11  # one left ahead, high joined ahead
    assert positions.of(queue, requests[1].key, now=later) == 2
    assert positions.of(queue, requests[0].key, now=later) is None


def test_a_ranking_costs_a_sort_at_most_once_per_interval():
    queue, requests = filled(2000)
    positions = QueuePositions(None)
    sorts = 0
    ranked = queue.ranked

    def counted():
        nonlocal sorts
        sorts += 1
        return ranked()

    queue.ranked = counted
    for step in range(1000):  # a change and a question every millisecond, for a second
        now = step * 1e-3
        queue.push(make_request(P.MEDIUM, arrival=2000 + step))
        queue.remove(requests[step].key)
        positions.of(queue, requests[-1].key, now)
    assert 1 <= sorts <= 1 / (2000 * RANK_S_PER_WAITER) + 1
