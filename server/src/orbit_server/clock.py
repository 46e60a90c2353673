"""Injected time (STYLE rule 6): services and stores take ``now`` from a :class:`Clock`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC, microsecond precision."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class FakeClock:
    """A clock that only moves when told to; for tests and simulations."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2030, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, delta: timedelta | float) -> datetime:
        """Move forward by ``delta`` (a timedelta or milliseconds)."""
        step = delta if isinstance(delta, timedelta) else timedelta(milliseconds=delta)
        if step < timedelta(0):
            raise ValueError("a clock never moves backwards")
        self._now += step
        return self._now

    def set(self, moment: datetime) -> None:
        if moment.tzinfo is None:
            raise ValueError("moment must be timezone-aware")
        self._now = moment


class AdjustableClock:
    """The system clock plus an offset that only grows: ``orbit dev --testing`` lets tests move
    it forward (``POST /v1/dev/clock:advance``) so that backoffs, timeouts and timers come due
    without waiting, while time keeps flowing for everything else."""

    def __init__(self) -> None:
        self._offset = timedelta(0)

    @property
    def offset(self) -> timedelta:
        return self._offset

    def now(self) -> datetime:
        return datetime.now(UTC) + self._offset

    def advance(self, delta: timedelta) -> datetime:
        if delta < timedelta(0):
            raise ValueError("a clock never moves backwards")
        self._offset += delta
        return self.now()


def to_rfc3339(moment: datetime | None) -> str | None:
    """RFC 3339 UTC with milliseconds, as API.md fixes for every time on the wire."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
