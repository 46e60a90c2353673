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
