"""A request's mailbox: the stream's read of every event, notices between them on a timeout."""

import asyncio

from scheduler.request import PriorityClass as P
from scheduler.request import Ticket
from tests.scheduler.factory import make_request


async def test_a_timed_out_wait_returns_none_and_loses_no_event():
    ticket = Ticket(make_request(P.LOW))
    assert await ticket.next_event(timeout=0.01) is None
    loop = asyncio.get_running_loop()
    loop.call_later(0.5, ticket.events.put_nowait, "first")  # far enough past the next wait on a busy machine
    assert await ticket.next_event(timeout=0.01) is None  # not yet
    assert await ticket.next_event(timeout=1) == "first"
    for event in ("a", "b"):
        ticket.events.put_nowait(event)
    assert [await ticket.next_event(timeout=0), await ticket.events.get()] == ["a", "b"]
    assert ticket.events.empty()


async def test_a_reader_cancelled_while_waiting_leaves_the_mailbox_usable():
    ticket = Ticket(make_request(P.LOW))
    reader = asyncio.create_task(ticket.next_event(timeout=None))
    await asyncio.sleep(0)
    reader.cancel()
    await asyncio.gather(reader, return_exceptions=True)
    ticket.events.put_nowait("later")
    assert await asyncio.wait_for(ticket.next_event(timeout=None), 1) == "later"
