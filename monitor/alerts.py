"""Wait-time alerts: a pure state machine, and a notifier that posts it to a webhook."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from typing import Literal

import httpx

from settings.schema import AlertsConfig

log = logging.getLogger("gpt_oss_webui.alerts")

Transition = Literal["fire", "recover"]


class WaitAlert:
    """Fires when the average wait stays above `wait_s` for `for_s`; recovers when it drops back;
    never fires again within `cooldown_s` of the last firing."""

    def __init__(self, wait_s: float, for_s: float, cooldown_s: float) -> None:
        self.wait_s, self.for_s, self.cooldown_s = wait_s, for_s, cooldown_s
        self.firing = False
        self._above_since: float | None = None
        self._last_fired = -math.inf

    def observe(self, now: float, avg_wait_s: float) -> Transition | None:
        if avg_wait_s <= self.wait_s:
            self._above_since = None
            if self.firing:
                self.firing = False
                return "recover"
            return None
        if self._above_since is None:
            self._above_since = now
        if not self.firing and now - self._above_since >= self.for_s and now - self._last_fired >= self.cooldown_s:
            self.firing, self._last_fired = True, now
            return "fire"
        return None


def payload(kind: Transition, avg_wait_s: float, waiting: int, config: AlertsConfig) -> dict:
    if kind == "fire":
        text = (
            f"GPT-OSS WebUI: average queue wait {avg_wait_s:.1f} s has stayed above {config.wait_s:g} s "
            f"for {config.for_s:g} s ({waiting} waiting)"
        )
    else:
        text = f"GPT-OSS WebUI recovered: average queue wait is {avg_wait_s:.1f} s ({waiting} waiting)"
    if config.format == "slack":
        return {"text": text}
    if config.format == "wecom":
        return {"msgtype": "text", "text": {"content": text}}
    event = "queue_wait_high" if kind == "fire" else "queue_wait_recovered"
    return {
        "event": event,
        "service": "gpt-oss-webui",
        "avg_wait_s": round(avg_wait_s, 3),
        "threshold_s": config.wait_s,
        "for_s": config.for_s,
        "waiting": waiting,
        "text": text,
    }


class AlertNotifier:
    def __init__(
        self, config: AlertsConfig, sample: Callable[[], tuple[float, int]], clock: Callable[[], float]
    ) -> None:
        self.config = config
        self.alert = WaitAlert(config.wait_s, config.for_s, config.cooldown_s)
        self._sample = sample
        self._clock = clock
        self.sent: list[dict] = []

    async def run_forever(self) -> None:
        async with httpx.AsyncClient(timeout=5) as client:
            while True:
                await asyncio.sleep(self.config.check_interval_s)
                await self.check(client)

    async def check(self, client: httpx.AsyncClient) -> None:
        avg_wait, waiting = self._sample()
        kind = self.alert.observe(self._clock(), avg_wait)
        if kind is None:
            return
        log.warning("alert %s: avg_wait=%.2fs waiting=%d", kind, avg_wait, waiting)
        body = payload(kind, avg_wait, waiting, self.config)
        try:
            response = await client.post(self.config.webhook_url, json=body)
            response.raise_for_status()
            self.sent.append(body)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:  # a malformed URL must not end the alert task
            log.warning("alert webhook failed: %s", _describe(exc))


def _describe(exc: Exception) -> str:
    """Without the URL: a Slack webhook's path is its secret."""
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    return type(exc).__name__
