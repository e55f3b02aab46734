"""How a request ended, or why it never started: one vocabulary for the scheduler, the pipeline's
error mapping, the metrics and the page."""

from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):
    FINISH = "finish"
    # refused at the door
    QUEUE_FULL = "queue_full"
    WAIT_LIMIT = "wait_limit"
    TOO_LARGE = "too_large"
    DUPLICATE_ID = "duplicate_id"
    RATE_LIMITED = "rate_limited"  # the caller's own limits
    # ended while queued or running
    DISPLACED = "displaced"
    TIMEOUT = "timeout"
    DISCONNECT = "disconnect"
    SHUTDOWN = "shutdown"
    ENGINE_ERROR = "engine_error"
    ENGINE_REJECTED = "engine_rejected"  # the engine found the request invalid (an upstream's 4xx)
    YIELDED = "yielded"  # background work gave its slot to interactive work, or found none idle

    def __str__(self) -> str:
        return self.value
