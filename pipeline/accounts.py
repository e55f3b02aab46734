"""What each caller may use and has used: the one read model behind `/v1/usage`, the page's
usage line and the monitor's per-user table."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.caller import Caller, Keyring
from pipeline.rate_limit import RateLimiter
from pipeline.refusal import Refusal
from pipeline.usage import UsageLedger, UsageTotals
from settings.schema import Limits


@dataclass(slots=True, frozen=True)
class Account:
    caller: str
    usage: UsageTotals
    limits: Limits
    tokens_today: int

    def as_dict(self) -> dict:
        return {
            "caller": self.caller,
            **self.usage.as_dict(),
            "tokens_today": self.tokens_today,
            "limits": self.limits.model_dump(),
        }


def accounts(
    keyring: Keyring,
    ledger: UsageLedger,
    limiter: RateLimiter,
    viewer: Caller,
    start: float,
    end: float,
    only: str | None = None,
    used: dict[str, UsageTotals] | None = None,
) -> list[Account]:
    """A caller sees its own account; an admin everyone's (or `only` one), configured callers
    included even before their first request."""
    if only is not None and only != viewer.name and not viewer.admin:
        raise Refusal(
            403, "seeing another caller's usage needs an admin key", param="caller", code="admin_key_required"
        )
    names = [only] if only is not None else [viewer.name] if not viewer.admin else None
    used = ledger.report(start, end) if used is None else used  # `used`: read from the file, past the ledger's week
    limits = keyring.limits_by_name()
    shown = names if names is not None else sorted(set(limits) | set(used))
    return [
        Account(name, used.get(name, UsageTotals()), limits.get(name, Limits()), limiter.day_tokens(name))
        for name in shown
    ]
