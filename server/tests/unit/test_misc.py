"""Ids, clocks, cursors, URLs and log redaction."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orbit_server.api.pagination import decode_cursor, encode_cursor, next_cursor
from orbit_server.clock import FakeClock, to_rfc3339
from orbit_server.errors import InvalidRequest
from orbit_server.ids import new_id
from orbit_server.observability.logging import redact_secrets, redact_text
from orbit_server.store.url import InvalidDatabaseUrl, MySQLUrl, SQLiteUrl, parse_database_url


def test_ids_sort_by_time() -> None:
    early, late = new_id(now_ms=1_000), new_id(now_ms=2_000)
    assert early < late and len(early) == 26
    assert new_id("key_").startswith("key_")


def test_fake_clock_only_moves_forward_when_told() -> None:
    clock = FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    assert clock.now() == clock.now()
    clock.advance(1500)
    assert clock.now() == datetime(2030, 1, 1, 0, 0, 1, 500_000, tzinfo=UTC)
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(timedelta(seconds=-1))


def test_times_are_rfc3339_utc_with_milliseconds() -> None:
    moment = datetime(2030, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    assert to_rfc3339(moment) == "2030-05-06T07:08:09.123Z"
    assert to_rfc3339(None) is None


def test_cursors_round_trip_and_reject_garbage() -> None:
    assert decode_cursor(encode_cursor("01abc")) == "01abc"
    assert decode_cursor(None) is None
    for bad in ("%%%", "abc", encode_cursor("x")[:-2] + "!!"):
        with pytest.raises(InvalidRequest):
            decode_cursor(bad)
    assert next_cursor(["a", "b"], 2) is not None and next_cursor(["a"], 2) is None


def test_database_urls() -> None:
    mysql = parse_database_url("mysql://orbit:p%40ss@db.example:3307/orbit")
    assert mysql == MySQLUrl("db.example", 3307, "orbit", "p@ss", "orbit")
    assert "p@ss" not in mysql.redacted()
    assert parse_database_url("sqlite:///data/orbit.db") == SQLiteUrl(Path("data/orbit.db"))
    assert parse_database_url("sqlite:////var/lib/orbit.db") == SQLiteUrl(Path("/var/lib/orbit.db"))
    for bad in ("postgres://x/y", "mysql://host", "sqlite://host/x", "sqlite:///"):
        with pytest.raises(InvalidDatabaseUrl):
            parse_database_url(bad)


def test_a_mysql_url_may_name_several_hosts_tried_in_order() -> None:
    url = parse_database_url("mysql://orbit:pw@db1:3306,db2:3307,db3,[fd00::7]:3310/orbit")
    assert isinstance(url, MySQLUrl)
    assert url.endpoints == (("db1", 3306), ("db2", 3307), ("db3", 3306), ("fd00::7", 3310))
    assert (url.host, url.port, url.user, url.password) == ("db1", 3306, "orbit", "pw")
    assert url.redacted() == "mysql://orbit:***@db1:3306,db2:3307,db3:3306,[fd00::7]:3310/orbit"
    one = parse_database_url("mysql://orbit@db1/orbit")
    assert isinstance(one, MySQLUrl) and one.endpoints == (("db1", 3306),)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mysql://u@db1:33o6,db2/orbit", "port of the database URL's host 'db1'"),
        ("mysql://u@db1,db2:0/orbit", "port of the database URL's host 'db2'"),
        ("mysql://u@db1,,db2/orbit", "a host of the database URL is empty"),
        ("mysql://u@db1,db1:3306/orbit", "the same host twice"),
        ("mysql://u@[fd00::1/orbit", "malformed host"),
        ("mysql://u@db1,db2/orbit?unix_socket=/run/m.sock", "one host only"),
    ],
)
def test_bad_host_lists_are_refused_clearly(url: str, says: str) -> None:
    with pytest.raises(InvalidDatabaseUrl, match=re.escape(says)):
        parse_database_url(url)


def test_secrets_are_redacted_from_log_events() -> None:
    token = "ok_01m8kfznxrf7444skh7v9w46zg_iWI9qf8GMP2NsC_u17_wsXpF0iAyMdTPBgkx1MJsLek"
    event = {
        "event": f"got {token}",
        "authorization": "Bearer abc",
        "headers": {"Authorization": "Bearer xyz", "accept": "json"},
        "url": "mysql://orbit:hunter2@db/orbit",
        "count": 3,
    }
    out = redact_secrets(None, "info", dict(event))
    text = str(out)
    assert token not in text and "abc" not in text and "xyz" not in text and "hunter2" not in text
    assert out["count"] == 3 and out["headers"]["accept"] == "json"
    assert redact_text("Bearer sometoken") == "Bearer ***"


def test_ids_of_one_process_are_strictly_increasing() -> None:
    ids = [new_id() for _ in range(5000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_printed_urls_use_a_reachable_host() -> None:
    from orbit_server.cli.serve import public_host

    assert public_host("0.0.0.0") == "127.0.0.1"
    assert public_host("::") == "[::1]"
    assert public_host("::1") == "[::1]"
    assert public_host("10.0.0.5") == "10.0.0.5"


def test_the_server_collects_garbage_less_often_and_skips_what_startup_built() -> None:
    import gc

    from orbit_server.cli.serve import GC_THRESHOLDS, tune_gc

    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold() == GC_THRESHOLDS and gc.get_threshold() != before
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_store_times_are_naive_utc_and_come_back_aware() -> None:
    from datetime import UTC, datetime, timedelta, timezone

    from orbit_server.store.base import to_db_time, utc

    moment = datetime(2026, 3, 29, 1, 30, 0, 123456, tzinfo=UTC)
    berlin = moment.astimezone(timezone(timedelta(hours=2)))
    assert to_db_time(moment) == to_db_time(berlin) == datetime(2026, 3, 29, 1, 30, 0, 123456)
    assert utc(to_db_time(berlin)) == moment and utc(berlin).tzinfo is UTC
    with pytest.raises(ValueError, match="timezone-aware"):
        to_db_time(datetime(2026, 3, 29, 1, 30))
