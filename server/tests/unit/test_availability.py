"""How the store tells an outage: one line when the database stops answering, none for a
database that is only busy, one when it answers again."""

from __future__ import annotations

from structlog.testing import capture_logs

from orbit_server.errors import DatabaseBusy, DatabaseUnavailable
from orbit_server.store.base import Availability


def test_an_outage_is_told_once_when_it_begins_and_once_when_it_ends() -> None:
    availability = Availability(report_every_s=3600)
    with capture_logs() as logs:
        for _ in range(100):
            availability.failed(DatabaseUnavailable("cannot connect"))
        availability.answered()
        availability.answered()
    assert [(e["log_level"], e["event"]) for e in logs] == [
        ("warning", "database unavailable: refusing work until it answers again"),
        ("info", "database available again"),
    ]
    assert logs[1]["refused"] == 100


def test_a_busy_database_is_no_outage() -> None:
    availability = Availability()
    with capture_logs() as logs:
        for _ in range(10):
            availability.failed(DatabaseBusy("no database connection became free in time"))
            availability.answered()
    assert logs == [] and availability.down_since is None


def test_a_long_outage_is_reminded_once_a_minute_not_once_per_refusal() -> None:
    clock = [0.0]
    availability = Availability(now=lambda: clock[0])
    with capture_logs() as logs:
        for _ in range(5 * 60 * 100):  # five minutes of 100 refusals a second
            availability.failed(DatabaseUnavailable("cannot connect"))
            clock[0] += 0.01
        availability.answered()
    assert [e["event"] for e in logs] == [
        "database unavailable: refusing work until it answers again",
        *["database still unavailable"] * 4,
        "database available again",
    ]
    assert [e.get("down_s") for e in logs[1:]] == [60.0, 120.0, 180.0, 240.0, 300.0]
    assert availability.down is False and availability.reason is None
