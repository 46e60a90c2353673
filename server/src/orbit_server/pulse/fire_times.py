"""When a schedule fires (SPEC P9): the fire times of a cron or fixed-interval schedule, as
UTC instants. Pure — no clock, no storage — so the scheduler, the preview and backfill all
compute the same slots, and tests can walk across daylight-saving changes.

Cron expressions have five fields, or six with seconds first, and are read in an IANA time
zone with Debian cron's rules across daylight-saving changes (``cronsim``): a time that does
not exist in a spring-forward gap fires once at the end of the gap (a daily ``30 2 * * *``
at 03:00), a fixed time in a repeated autumn hour fires once (its first occurrence), and
schedules with a wildcard hour fire in every real hour, both repeated ones included. Each
fire time is a distinct instant; they only ever increase.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

MIN_INTERVAL = timedelta(seconds=1)


class InvalidTiming(ValueError):
    """A cron expression, time zone or interval that no schedule can use; the message says
    which, in words for the caller."""


@dataclass(frozen=True, slots=True)
class Cron:
    expression: str
    timezone: str


@dataclass(frozen=True, slots=True)
class Interval:
    """Fires at ``anchor`` and every ``every`` after it."""

    every: timedelta
    anchor: datetime


Timing = Cron | Interval


def cron(expression: str, timezone: str = "UTC") -> Cron:
    """A validated cron timing: five fields, or six with seconds first; a known IANA zone."""
    text = " ".join(expression.split())
    fields = len(text.split(" ")) if text else 0
    if fields not in (5, 6):
        raise InvalidTiming(
            f"a cron expression has 5 fields (minute hour day month weekday) or 6 with "
            f"seconds first; {expression!r} has {fields}"
        )
    zone = _zone(timezone)
    try:
        CronSim(text, datetime(2000, 1, 1, tzinfo=zone))
    except CronSimError as exc:
        raise InvalidTiming(f"invalid cron expression {expression!r}: {exc}") from None
    return Cron(text, timezone)


def interval(every: timedelta, anchor: datetime) -> Interval:
    if every < MIN_INTERVAL:
        raise InvalidTiming("an interval must be at least one second")
    if anchor.tzinfo is None:
        raise ValueError("the anchor of an interval must be timezone-aware")
    return Interval(every, anchor.astimezone(UTC))


def fire_times(
    timing: Timing, after: datetime, *, until: datetime | None = None, limit: int
) -> list[datetime]:
    """Up to ``limit`` fire times strictly after ``after`` and not after ``until``, in UTC,
    in order."""
    if after.tzinfo is None or (until is not None and until.tzinfo is None):
        raise ValueError("fire times are computed between timezone-aware instants")
    found: list[datetime] = []
    for moment in itertools.islice(_after(timing, after.astimezone(UTC)), limit):
        if until is not None and moment > until:
            break
        found.append(moment)
    return found


def next_fire(timing: Timing, after: datetime, *, until: datetime | None = None) -> datetime | None:
    found = fire_times(timing, after, until=until, limit=1)
    return found[0] if found else None


def _after(timing: Timing, after: datetime) -> Iterator[datetime]:
    if isinstance(timing, Interval):
        steps = 0 if after < timing.anchor else (after - timing.anchor) // timing.every + 1
        moment = timing.anchor + steps * timing.every
        while True:
            yield moment
            moment += timing.every
    last = after
    local = after.astimezone(_zone(timing.timezone))
    for found in CronSim(timing.expression, local):  # stops after 50 years without a match
        moment = found.astimezone(UTC)
        if moment > last:  # distinct, increasing instants whatever the local clock did
            last = moment
            yield moment


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidTiming(
            f"unknown time zone {name!r}; use an IANA name such as Europe/Berlin"
        ) from None
