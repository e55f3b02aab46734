"""What the page shows of usage and limits: the signed-in user's line under the header, and the
per-user table admins see on the monitor. Both read the pipeline's accounts, as /v1/usage does."""

from __future__ import annotations

import html
import time

from pipeline.accounts import Account, accounts
from pipeline.caller import Caller
from pipeline.rate_limit import DAY_S
from settings.schema import Limits
from ui.i18n import message
from wiring import Services


def _accounts(services: Services, viewer: Caller, only: str | None = None) -> list[Account]:
    now, pipeline = time.time(), services.pipeline
    return accounts(services.keyring, pipeline.usage, pipeline.limiter, viewer, now - DAY_S, now, only)


def usage_html(services: Services, caller: Caller, code: str) -> str:
    """Empty on an open server without limits: there is one user, and nothing to count against."""
    if not services.keyring.any_keys and caller.limits == Limits():
        return ""
    own = _accounts(services, caller, caller.name)[0]
    quota = own.limits.daily_tokens
    text = message(
        code,
        "usage",
        tokens=own.tokens_today,
        quota="" if quota is None else f" / {quota}",
        requests=own.usage.requests,
        limits=limits_text(own.limits, code),
    )
    return f'<div id="usage" style="font-size:0.9em;opacity:0.8">{html.escape(text)}</div>'


def users_markdown(services: Services, caller: Caller, code: str) -> str:
    if not caller.admin or not services.keyring.any_keys:
        return ""
    rows = [
        f"| {a.caller} | {a.usage.requests} | {a.usage.prompt_tokens} / {a.usage.completion_tokens} | "
        f"{a.usage.cache_hits} | {a.usage.rejections} | {_mean_wait(a)} | {a.tokens_today} | "
        f"{limits_text(a.limits, code)} |"
        for a in _accounts(services, caller)
    ]
    header = message(code, "users_header")
    return f"\n\n#### {message(code, 'users_title')}\n\n{header}\n|---|---|---|---|---|---|---|---|\n" + "\n".join(rows)


def limits_text(limits: Limits, code: str) -> str:
    shown = [f"{name} {value}" for name, value in limits.model_dump().items() if value is not None]
    return ", ".join(shown) if shown else message(code, "no_limits")


def _mean_wait(account: Account) -> str:
    served = account.usage.requests - account.usage.rejections - account.usage.cache_hits
    return "–" if served <= 0 else f"{account.usage.queue_wait_s / served:.1f} s"
