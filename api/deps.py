"""What a route reaches, typed: the server's parts (built by wiring.py) and the API's own
background responses, kept on the app's state. As functions of the request, so a helper
deep in a route reads them the same way a route's signature does (`Depends(services_of)`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from fastapi import Request

from api.responses_background import BackgroundResponses
from batches.runner import BatchRunner
from monitor.metrics import Metrics
from pipeline.caller import Caller
from wiring import Services

SignedIn = Callable[[Request], Caller | None]  # the page's session cookie -> its caller (ui/mount.py sets it)


def services_of(request: Request) -> Services:
    return cast(Services, request.app.state.services)


def background_of(request: Request) -> BackgroundResponses:
    return cast(BackgroundResponses, request.app.state.background)


def metrics_of(request: Request) -> Metrics:
    return cast(Metrics, request.app.state.metrics)


def signed_in_of(request: Request) -> SignedIn | None:
    """None where no page is mounted."""
    return cast(SignedIn | None, getattr(request.app.state, "signed_in", None))


def batch_runner_of(request: Request) -> BatchRunner:
    runner = services_of(request).batch_runner
    if runner is None:
        raise RuntimeError("the batch runner is built with the app")
    return runner
