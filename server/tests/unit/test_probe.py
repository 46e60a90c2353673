"""The startup probe's verdicts on what a MySQL-family server reports (DATABASE.md)."""

from __future__ import annotations

import pytest

from orbit_server.store.probe import (
    UnsupportedServer,
    evaluate_mysql_server,
    evaluate_sqlite_version,
)

DURABLE = {"innodb_flush_log_at_trx_commit": "1", "sync_binlog": "1", "log_bin": "OFF"}


@pytest.mark.parametrize(
    "version", ["10.11.6-MariaDB-0+deb12u1", "11.4.2-MariaDB", "8.4.0", "9.1.0"]
)
def test_supported_servers_pass_cleanly(version: str) -> None:
    assert evaluate_mysql_server(version, DURABLE).warnings == ()


@pytest.mark.parametrize("version", ["10.5.19-MariaDB", "5.7.44", "8.0.0"])
def test_servers_without_skip_locked_are_refused(version: str) -> None:
    with pytest.raises(UnsupportedServer, match="SKIP LOCKED"):
        evaluate_mysql_server(version, DURABLE)


def test_old_but_capable_servers_warn() -> None:
    warnings = evaluate_mysql_server("10.6.16-MariaDB", DURABLE).warnings
    assert len(warnings) == 1 and "older than the supported" in warnings[0]


def test_galera_is_refused() -> None:
    with pytest.raises(UnsupportedServer, match="Galera"):
        evaluate_mysql_server("10.11.6-MariaDB", {**DURABLE, "wsrep_on": "ON"})


def test_statement_binlog_is_refused_when_the_binlog_is_on() -> None:
    with pytest.raises(UnsupportedServer, match="binlog_format"):
        evaluate_mysql_server("8.4.0", {**DURABLE, "log_bin": "ON", "binlog_format": "STATEMENT"})
    off = evaluate_mysql_server("8.4.0", {**DURABLE, "binlog_format": "STATEMENT"})
    assert any("binlog_format" in w for w in off.warnings)


def test_non_durable_flush_settings_warn() -> None:
    info = evaluate_mysql_server(
        "10.11.6-MariaDB",
        {"innodb_flush_log_at_trx_commit": "2", "log_bin": "ON", "sync_binlog": "0"},
    )
    assert len(info.warnings) == 2
    assert any("innodb_flush_log_at_trx_commit" in w for w in info.warnings)
    assert any("sync_binlog" in w for w in info.warnings)


def test_unreadable_versions_are_refused() -> None:
    with pytest.raises(UnsupportedServer):
        evaluate_mysql_server("garbage", DURABLE)


def test_sqlite_needs_returning() -> None:
    assert evaluate_sqlite_version("3.40.1").dialect == "sqlite"
    with pytest.raises(UnsupportedServer):
        evaluate_sqlite_version("3.31.1")
