"""Fire times of cron and interval schedules, across daylight-saving changes in three zones
(SPEC P9): pure computation, instants given, no clock."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

import pytest

from orbit_server.pulse.fire_times import (
    EARLIEST,
    LATEST,
    InvalidTiming,
    check_instant,
    cron,
    fire_times,
    interval,
    next_fire,
)


def at(text: str) -> datetime:
    """A UTC instant from ``YYYY-MM-DD HH:MM[:SS]``."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def fmt(moments: list[datetime]) -> list[str]:
    return [m.strftime("%m-%d %H:%M:%S") for m in moments]


def test_shanghai_has_no_daylight_saving_a_daily_time_is_always_eight_hours_ahead() -> None:
    daily = cron("0 2 * * *", "Asia/Shanghai")
    found = fire_times(daily, at("2026-03-07 00:00"), limit=3)
    assert fmt(found) == ["03-07 18:00:00", "03-08 18:00:00", "03-09 18:00:00"]
    assert all(m.tzinfo is UTC for m in found)


@pytest.mark.parametrize(
    ("zone", "start", "expected"),
    [
        # 02:30 EST, then 03:00 EDT on the day of the gap (07:00 UTC), then 02:30 EDT.
        (
            "America/New_York",
            "2026-03-07 07:00",
            ["03-07 07:30:00", "03-08 07:00:00", "03-09 06:30:00"],
        ),
        # 02:30 CET, then 03:00 CEST (01:00 UTC), then 02:30 CEST.
        (
            "Europe/Berlin",
            "2026-03-28 01:00",
            ["03-28 01:30:00", "03-29 01:00:00", "03-30 00:30:00"],
        ),
    ],
)
def test_a_daily_time_in_the_spring_gap_fires_once_when_the_gap_ends(
    zone: str, start: str, expected: list[str]
) -> None:
    """02:30 does not exist on the day clocks jump from 02:00 to 03:00: it fires at 03:00."""
    assert fmt(fire_times(cron("30 2 * * *", zone), at(start), limit=3)) == expected


def test_an_hourly_schedule_skips_the_hour_that_does_not_exist() -> None:
    hourly = cron("0 * * * *", "America/New_York")
    found = fire_times(hourly, at("2026-03-08 05:30"), limit=3)  # 00:30 EST
    assert fmt(found) == [
        "03-08 06:00:00",
        "03-08 07:00:00",
        "03-08 08:00:00",
    ]  # 01:00, 03:00, 04:00


@pytest.mark.parametrize(
    ("zone", "expression", "start", "expected"),
    [
        # A fixed time in the repeated hour fires once, at its first occurrence (summer time).
        (
            "America/New_York",
            "30 1 * * *",
            "2026-10-31 12:00",
            ["11-01 05:30:00", "11-02 06:30:00"],
        ),
        ("Europe/Berlin", "30 2 * * *", "2026-10-24 12:00", ["10-25 00:30:00", "10-26 01:30:00"]),
    ],
)
def test_a_fixed_time_in_the_autumn_overlap_fires_once(
    zone: str, expression: str, start: str, expected: list[str]
) -> None:
    assert fmt(fire_times(cron(expression, zone), at(start), limit=2)) == expected


def test_a_wildcard_hour_fires_in_both_repeated_hours_as_distinct_instants() -> None:
    every_half_hour = cron("*/30 * * * *", "America/New_York")
    found = fire_times(every_half_hour, at("2026-11-01 04:45"), limit=5)  # 00:45 EDT
    assert fmt(found) == [
        "11-01 05:00:00", "11-01 05:30:00",  # 01:00, 01:30 EDT
        "11-01 06:00:00", "11-01 06:30:00",  # 01:00, 01:30 EST
        "11-01 07:00:00",
    ]  # fmt: skip
    # Resuming from any of them gives the rest: the repeated local times are not confused.
    assert fire_times(every_half_hour, found[2], limit=2) == found[3:5]
    assert fire_times(every_half_hour, found[1], limit=1) == [found[2]]


def test_a_seconds_field_comes_first() -> None:
    every_20_s = cron("*/20 * * * * *", "Europe/Berlin")
    found = fire_times(every_20_s, at("2026-03-29 00:59:50"), limit=3)  # across the gap
    assert fmt(found) == ["03-29 01:00:00", "03-29 01:00:20", "03-29 01:00:40"]


def test_until_bounds_the_fire_times_and_a_schedule_may_have_none_left() -> None:
    daily = cron("0 12 * * *", "UTC")
    found = fire_times(daily, at("2026-01-01 00:00"), until=at("2026-01-03 12:00"), limit=10)
    assert fmt(found) == ["01-01 12:00:00", "01-02 12:00:00", "01-03 12:00:00"]
    assert next_fire(daily, at("2026-01-03 12:00"), until=at("2026-01-03 23:00")) is None
    never = cron("0 0 */20 * 1L")  # the 1st or 21st of a month that is its last Monday
    assert next_fire(never, at("2026-01-01 00:00")) is None  # none in the next 50 years


def test_an_interval_fires_at_its_anchor_and_every_step_after() -> None:
    every_90_s = interval(timedelta(seconds=90), at("2026-01-01 00:00"))
    assert fmt(fire_times(every_90_s, at("2025-12-31 23:00"), limit=2)) == [
        "01-01 00:00:00", "01-01 00:01:30",
    ]  # fmt: skip
    # Strictly after: a fire time given as ``after`` is not answered again.
    assert fmt(fire_times(every_90_s, at("2026-01-01 00:03:00"), limit=2)) == [
        "01-01 00:04:30", "01-01 00:06:00",
    ]  # fmt: skip
    assert fire_times(every_90_s, at("2026-01-01 00:03:01"), limit=1) == [at("2026-01-01 00:04:30")]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: cron("0 2 * *"), "5 fields"),
        (lambda: cron("61 * * * *"), "invalid cron expression"),
        (lambda: cron("0 0 30 2 *"), "invalid cron expression"),  # February 30th
        (lambda: cron("0 2 * * *", "Mars/Olympus_Mons"), "unknown time zone"),
        (lambda: cron("0 2 * * *", "../etc/passwd"), "unknown time zone"),
        (lambda: interval(timedelta(milliseconds=500), at("2026-01-01 00:00")), "one second"),
    ],
)
def test_timings_no_schedule_can_use_are_refused_with_a_reason(
    make: Callable[[], object], message: str
) -> None:
    with pytest.raises(InvalidTiming, match=message):
        make()


def test_fire_times_need_aware_instants() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        fire_times(cron("* * * * *"), datetime(2026, 1, 1), limit=1)


# -- the ends of the calendar --------------------------------------------------------------------

EDGE_ZONES = ("UTC", "Pacific/Kiritimati", "Pacific/Pago_Pago", "America/New_York")
EDGE_CRONS = ("* * * * *", "*/20 * * * * *", "0 0 * 2 1#5", "0 0 L * *", "0 0 29 2 *", "0 3 * * *")


@pytest.mark.parametrize("zone", EDGE_ZONES)
@pytest.mark.parametrize("expression", EDGE_CRONS)
def test_cron_fire_times_near_the_ends_of_the_calendar_stop_without_an_error(
    zone: str, expression: str
) -> None:
    timing = cron(expression, zone)
    for after in (
        datetime(9998, 12, 1, tzinfo=UTC),
        datetime(9998, 12, 31, 23, 59, 59, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime.max.replace(tzinfo=timezone(timedelta(hours=-14))),
        datetime.min.replace(tzinfo=timezone(timedelta(hours=14))),
        datetime.min.replace(tzinfo=UTC),
    ):
        found = fire_times(timing, after, limit=10)
        assert all(EARLIEST <= moment < LATEST for moment in found), (after, found)
        assert found == sorted(set(found))


def test_an_interval_near_the_end_of_the_calendar_has_fewer_fire_times_and_no_error() -> None:
    hourly = interval(timedelta(hours=1), at("9998-12-31 21:30"))
    assert fmt(fire_times(hourly, at("9998-12-31 21:00"), limit=100)) == [
        "12-31 21:30:00", "12-31 22:30:00", "12-31 23:30:00",
    ]  # fmt: skip
    assert fire_times(hourly, datetime.max.replace(tzinfo=UTC), limit=5) == []
    yearly = interval(timedelta(days=366), at("1970-01-01 00:00"))
    assert fire_times(yearly, datetime.min.replace(tzinfo=UTC), limit=1) == [EARLIEST]
    # Anchors from before the range (stored before they were refused): fire times within it.
    ancient = interval(timedelta(days=1), at("1000-01-01 10:00"))
    assert fire_times(ancient, datetime.min.replace(tzinfo=UTC), limit=1) == [
        at("1970-01-01 10:00")
    ]
    assert fire_times(ancient, at("2030-01-01 11:00"), limit=1) == [at("2030-01-02 10:00")]
    first = interval(timedelta(days=1), datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))))
    assert fire_times(first, datetime.min.replace(tzinfo=UTC), limit=1)[0].year == 1970
    assert len(fire_times(yearly, at("9990-01-01 00:00"), limit=100)) == 9


def test_instants_outside_the_range_of_fire_times_are_refused_with_a_reason() -> None:
    for moment in (
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))),
        datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC),
        LATEST,
        datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC),
    ):
        with pytest.raises(InvalidTiming, match="start_at must be from 1970-01-01T00:00:00Z"):
            check_instant("start_at", moment)
    check_instant("start_at", EARLIEST)
    check_instant("start_at", LATEST - timedelta(microseconds=1))
