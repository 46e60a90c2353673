"""When a schedule fires (SPEC P9): the fire times of a cron or fixed-interval schedule, as
UTC instants. Pure — no clock, no storage — so the scheduler, the preview and backfill all
compute the same slots, and tests can walk across daylight-saving changes.

Cron expressions have five fields, or six with seconds first, and are read in an IANA time
zone with Debian cron's rules across daylight-saving changes (``cronsim``): a time that does
not exist in a spring-forward gap fires once at the end of the gap (a daily ``30 2 * * *``
at 03:00), a fixed time in a repeated autumn hour fires once (its first occurrence), and
schedules with a wildcard hour fire in every real hour, both repeated ones included. Each
fire time is a distinct instant; they only ever increase.

Fire times lie in ``[EARLIEST, LATEST)``: from 1970 to the start of the year 9999, well inside
what ``datetime``, the databases and every zone's local time can hold. The computation is
total: near the ends of that range a timing simply has no more fire times, and no
``OverflowError`` or ``ValueError`` of the calendar ever escapes it, whatever instants it is
given.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

MIN_INTERVAL = timedelta(seconds=1)
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)  # no fire time at or after it
# Instants are clamped into this wider range before any arithmetic: a microsecond or a day more
# or less, or any zone's local time, then still fits in a datetime.
_FLOOR = EARLIEST - timedelta(days=2)
_CEILING = LATEST + timedelta(days=2)
_US = timedelta(microseconds=1)


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


def clamp(moment: datetime) -> datetime:
    """``moment`` (timezone-aware), or the nearest instant a couple of days beyond the range of
    fire times: safe to shift by a day and to read in any zone; comparisons with fire times
    are unchanged."""
    if moment < _FLOOR:
        return _FLOOR
    if moment > _CEILING:
        return _CEILING
    return moment.astimezone(UTC)


def just_before(moment: datetime) -> datetime:
    """The instant a microsecond before ``moment`` (clamped first)."""
    return clamp(moment) - _US


def just_after(moment: datetime) -> datetime:
    """The instant a microsecond after ``moment`` (clamped first)."""
    return clamp(moment) + _US


def check_instant(name: str, moment: datetime) -> None:
    """Raises ``InvalidTiming`` unless ``moment`` is in the range of fire times."""
    if not EARLIEST <= moment < LATEST:
        raise InvalidTiming(
            f"{name} must be from {EARLIEST:%Y-%m-%dT%H:%M:%SZ} and before "
            f"{LATEST:%Y-%m-%dT%H:%M:%SZ}"
        )


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
    try:
        return Interval(every, anchor.astimezone(UTC))
    except OverflowError:  # stored before such times were refused: none of its slots is in range
        return Interval(every, clamp(anchor))


def fire_times(
    timing: Timing, after: datetime, *, until: datetime | None = None, limit: int
) -> list[datetime]:
    """Up to ``limit`` fire times strictly after ``after`` and not after ``until``, in UTC,
    in order; fewer when the timing has no more before ``LATEST``."""
    if after.tzinfo is None or (until is not None and until.tzinfo is None):
        raise ValueError("fire times are computed between timezone-aware instants")
    if after >= LATEST or limit <= 0:
        return []
    found: list[datetime] = []
    start = max(clamp(after), EARLIEST - _US)
    for moment in itertools.islice(_after(timing, start), limit):
        if until is not None and moment > until:
            break
        found.append(moment)
    return found


def next_fire(timing: Timing, after: datetime, *, until: datetime | None = None) -> datetime | None:
    found = fire_times(timing, after, until=until, limit=1)
    return found[0] if found else None


def _after(timing: Timing, after: datetime) -> Iterator[datetime]:
    """Fire times after ``after`` (within the range) and before ``LATEST``."""
    if isinstance(timing, Interval):
        yield from _interval_after(timing, after)
        return
    last = after
    local = after.astimezone(_zone(timing.timezone))
    found = iter(CronSim(timing.expression, local))  # stops after 50 years without a match
    while True:
        try:
            moment = next(found).astimezone(UTC)
        except (StopIteration, OverflowError, ValueError):  # past the calendar's end
            return
        if moment >= LATEST:
            return
        if moment > last:  # distinct, increasing instants whatever the local clock did
            last = moment
            yield moment


def _interval_after(timing: Interval, after: datetime) -> Iterator[datetime]:
    anchor = timing.anchor
    steps = 0 if after < anchor else (after - anchor) // timing.every + 1
    try:  # at most one interval (a year or so) past ``after``, which is within the range
        moment = anchor + steps * timing.every
    except OverflowError:
        return
    while moment < LATEST:
        yield moment
        if timing.every >= LATEST - moment:
            return
        moment += timing.every


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidTiming(
            f"unknown time zone {name!r}; use an IANA name such as Europe/Berlin"
        ) from None
