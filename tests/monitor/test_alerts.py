"""Wait-time alerts: the state machine, the payload formats, the notifier against a real receiver."""

from __future__ import annotations

import logging
import socket
import time

import httpx
import pytest

from monitor.alerts import AlertNotifier, WaitAlert, payload
from settings.schema import AlertsConfig
from tests.conftest import live_server
from tests.monitor.helpers import SLOW, chat, in_thread, joined, receiver
from tests.scheduler.factory import FakeClock


@pytest.fixture
def alert_logs(caplog, monkeypatch):
    """configure_logging stops propagation at gpt_oss_webui; caplog listens at the root."""
    monkeypatch.setattr(logging.getLogger("gpt_oss_webui"), "propagate", True)
    caplog.set_level(logging.WARNING, logger="gpt_oss_webui.alerts")
    return caplog


def test_fires_once_after_for_s_above_the_threshold():
    alert = WaitAlert(wait_s=5, for_s=60, cooldown_s=600)
    assert alert.observe(0, 5.0) is None  # at the threshold is not above it
    assert alert.observe(10, 6.0) is None
    assert alert.observe(69.9, 9.0) is None and not alert.firing
    assert alert.observe(70, 9.0) == "fire" and alert.firing
    assert [alert.observe(t, 20.0) for t in (71, 200, 1000)] == [None, None, None]


def test_a_dip_restarts_the_for_s_window():
    alert = WaitAlert(wait_s=5, for_s=60, cooldown_s=0)
    assert alert.observe(0, 6) is None
    assert alert.observe(50, 4) is None  # back under before for_s: no alert, window reset
    assert alert.observe(55, 6) is None
    assert alert.observe(110, 6) is None
    assert alert.observe(115, 6) == "fire"


def test_recovers_once_and_respects_the_cooldown():
    alert = WaitAlert(wait_s=5, for_s=10, cooldown_s=100)
    assert alert.observe(0, 6) is None and alert.observe(10, 6) == "fire"
    assert alert.observe(20, 1) == "recover" and not alert.firing
    assert alert.observe(21, 1) is None and alert.observe(22, 0) is None
    assert alert.observe(30, 7) is None
    assert alert.observe(45, 7) is None  # above for 15 s, but within the cooldown of the last firing
    assert alert.observe(50, 2) is None  # never fired again, so nothing to recover
    assert alert.observe(60, 7) is None and alert.observe(109, 7) is None
    assert alert.observe(110, 7) == "fire"  # cooldown over and above for 50 s
    assert alert.observe(111, 3) == "recover"


def test_payload_formats():
    generic = payload("fire", 7.25, 4, AlertsConfig(wait_s=5, for_s=60))
    assert generic["event"] == "queue_wait_high" and generic["service"] == "gpt-oss-webui"
    assert generic["avg_wait_s"] == 7.25 and generic["threshold_s"] == 5 and generic["for_s"] == 60
    assert generic["waiting"] == 4 and "7.2 s" in generic["text"] and "4 waiting" in generic["text"]
    recovered = payload("recover", 0.5, 0, AlertsConfig())
    assert recovered["event"] == "queue_wait_recovered" and "recovered" in recovered["text"]

    slack = payload("fire", 7.25, 4, AlertsConfig(format="slack"))
    assert list(slack) == ["text"] and slack["text"] == generic["text"]
    wecom = payload("recover", 0.5, 0, AlertsConfig(format="wecom"))
    assert wecom == {"msgtype": "text", "text": {"content": recovered["text"]}}


def _notifier(url: str, samples: list, clock: FakeClock) -> AlertNotifier:
    config = AlertsConfig(webhook_url=url, wait_s=5, for_s=60, cooldown_s=600)
    return AlertNotifier(config, lambda: samples[-1], clock)


async def test_notifier_posts_one_fire_then_one_recover():
    clock = FakeClock(0.0)
    samples = [(1.0, 0)]
    with receiver() as hook:
        notifier = _notifier(hook.url, samples, clock)
        async with httpx.AsyncClient(timeout=5) as client:
            for t, sample in [
                (0, (1.0, 0)),
                (10, (8.0, 3)),
                (40, (9.0, 5)),
                (69, (9.5, 6)),
                (70, (9.0, 6)),
                (80, (12.0, 8)),
                (90, (6.0, 2)),
                (100, (2.0, 0)),
                (110, (0.5, 0)),
            ]:
                clock.now = float(t)
                samples.append(sample)
                await notifier.check(client)
        bodies = hook.received()
    assert [b["event"] for b in bodies] == ["queue_wait_high", "queue_wait_recovered"]
    assert bodies[0]["avg_wait_s"] == 9.0 and bodies[0]["waiting"] == 6
    assert bodies[1]["avg_wait_s"] == 2.0 and bodies[1]["waiting"] == 0
    assert notifier.sent == bodies


@pytest.mark.parametrize("broken", ["500", "closed_port", "malformed_url"])
async def test_a_failing_webhook_logs_a_warning_and_raises_nothing(broken, alert_logs):
    clock = FakeClock(0.0)
    samples = [(9.0, 3)]
    with receiver() as hook:
        hook.status = 500
        url = hook.url
        if broken == "closed_port":
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                url = f"http://127.0.0.1:{s.getsockname()[1]}/hook"
        elif broken == "malformed_url":
            url = "http://[::1/hook"  # httpx.InvalidURL is not an httpx.HTTPError
        notifier = _notifier(url, samples, clock)
        async with httpx.AsyncClient(timeout=5) as client:
            await notifier.check(client)
            clock.now = 60.0
            await notifier.check(client)
        posted = hook.received()
    assert len(posted) == (1 if broken == "500" else 0)
    assert notifier.sent == [] and notifier.alert.firing
    failures = [r for r in alert_logs.records if "alert webhook failed" in r.getMessage()]
    assert len(failures) == 1 and failures[0].levelno == logging.WARNING
    assert "/hook" not in failures[0].getMessage()  # a Slack webhook's path is its secret


def test_queue_wait_alerts_end_to_end():
    with receiver() as hook:
        with live_server(
            *SLOW,
            f"alerts.webhook_url={hook.url}",
            "alerts.wait_s=0.1",
            "alerts.for_s=0.2",
            "alerts.check_interval_s=0.05",
            "scheduler.pressure.interval_s=0.5",
        ) as live:
            blocker = in_thread(chat, live.url, max_tokens=100)
            live.wait_for(lambda s: s["running"] == 1)
            waiters = [in_thread(chat, live.url, max_tokens=3) for _ in range(2)]
            fired = hook.wait_for(lambda bodies: bodies)
            assert [b["event"] for b in fired] == ["queue_wait_high"]
            assert fired[0]["avg_wait_s"] > 0.1 and fired[0]["waiting"] >= 1
            for box in (blocker, *waiters):
                assert joined(box).status_code == 200
            bodies = hook.wait_for(lambda bodies: len(bodies) >= 2)
            deadline = time.monotonic() + 5  # the notifier records a body only after the receiver has answered
            while len(live.services.alerts.sent) < len(bodies) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert live.services.alerts.sent == bodies
    assert [b["event"] for b in bodies] == ["queue_wait_high", "queue_wait_recovered"]
    assert bodies[1]["waiting"] == 0 and bodies[1]["avg_wait_s"] <= 0.1
