"""Why a call gets no answer, as a status and a code both transports show the same way."""

from __future__ import annotations

from scheduler.outcome import Outcome
from scheduler.request import SchedulerError

YIELDED = "yielded_to_interactive"  # a batch line's: it is tried again, not answered

_STATUS: dict[Outcome, tuple[int, str]] = {
    Outcome.QUEUE_FULL: (429, "queue_full"),
    Outcome.DISPLACED: (429, "queue_displaced"),
    Outcome.TIMEOUT: (429, "queue_timeout"),
    Outcome.WAIT_LIMIT: (429, "queue_wait_limit"),
    Outcome.TOO_LARGE: (400, "context_length_exceeded"),
    Outcome.DUPLICATE_ID: (400, "duplicate_request_id"),
    Outcome.RATE_LIMITED: (429, "rate_limit_exceeded"),
    Outcome.SHUTDOWN: (503, "server_shutting_down"),
    Outcome.DISCONNECT: (499, "client_disconnected"),
    Outcome.ENGINE_ERROR: (500, "engine_error"),
    Outcome.ENGINE_REJECTED: (400, "upstream_rejected"),
    Outcome.YIELDED: (503, YIELDED),
}


class Refusal(Exception):
    """`retry_after_s` is set when trying again later can succeed (a busy server, a loading model);
    `headers` go out with the error (rate-limit figures, Allow)."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        retry_after_s: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.retry_after_s = retry_after_s
        self.headers = headers or {}

    @classmethod
    def from_scheduler(cls, error: SchedulerError, param: str | None = None) -> Refusal:
        status, code = _STATUS.get(error.kind, (500, str(error.kind)))
        if param is None and error.kind is Outcome.DUPLICATE_ID:
            param = "request_id"
        return cls(status, error.message, param=param, code=code, retry_after_s=error.retry_after_s)
