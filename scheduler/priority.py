"""Which class and score a request gets, from what the client sent. Pure: no I/O, no clock."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.request import PriorityClass
from settings.schema import SchedulerConfig


class PriorityInputError(ValueError):
    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(slots=True, frozen=True)
class PriorityInput:
    header: str | None = None
    key_class: PriorityClass | None = None  # the class the caller's key runs at
    ceiling: PriorityClass | None = None  # the highest class the caller's key may ask for
    body: str | int | None = None
    batch: bool = False
    max_tokens: int | None = None
    temperature: float | None = None
    unnamed: PriorityClass = PriorityClass.MEDIUM  # the class when no source names one


def resolve_priority(given: PriorityInput, config: SchedulerConfig) -> tuple[PriorityClass, float]:
    """Strongest source first: batch mode, X-Priority header, the key's class, body field, then
    `unnamed` (medium, or low for background work); then no higher than the key's ceiling.

    A short deterministic request (max_tokens <= short_max_tokens at temperature 0) is raised by
    `short_bonus`, half a level by default, so scripts and CLI tools get low latency. Every value
    given is validated, even one a stronger source overrides.
    """
    header = _parse_class(given.header, "X-Priority") if given.header is not None else None
    body = _parse_body(given.body, config) if given.body is not None else None
    if given.batch:
        cls, score = PriorityClass.LOW, config.weights.low
    elif header is not None:
        cls, score = header, config.weights.of(header.value)
    elif given.key_class is not None:
        cls, score = given.key_class, config.weights.of(given.key_class.value)
    elif body is not None:
        cls, score = body
    else:
        cls, score = given.unnamed, config.weights.of(given.unnamed.value)
    if given.ceiling is not None and cls.rank < given.ceiling.rank:
        cls, score = given.ceiling, config.weights.of(given.ceiling.value)
    if _is_short_deterministic(given, config):
        score += config.short_bonus
    return cls, score


def _parse_class(value: str, param: str) -> PriorityClass:
    try:
        return PriorityClass(value.strip().lower())
    except ValueError:
        raise PriorityInputError(param, f"{param} must be one of high, medium, low; got {value!r}") from None


def _parse_body(value: str | int, config: SchedulerConfig) -> tuple[PriorityClass, float]:
    if isinstance(value, str):
        cls = _parse_class(value, "priority")
        return cls, config.weights.of(cls.value)
    w = config.weights
    if isinstance(value, bool) or not (0 <= value <= w.high):
        raise PriorityInputError(
            "priority", f"priority must be high, medium, low or an integer between 0 and {w.high:g}; got {value!r}"
        )
    if value >= w.high:
        return PriorityClass.HIGH, float(value)
    return (PriorityClass.MEDIUM if value >= w.medium else PriorityClass.LOW), float(value)


def _is_short_deterministic(given: PriorityInput, config: SchedulerConfig) -> bool:
    return (
        given.max_tokens is not None
        and given.max_tokens <= config.short_max_tokens
        and given.temperature is not None
        and given.temperature == 0
    )
