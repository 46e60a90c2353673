"""The startup probe's verdicts on what a MySQL-family server reports (DATABASE.md)."""

from __future__ import annotations

import pytest

from orbit_server.store.probe import (
    GALERA_SYNCED,
    PRIMARY,
    NodeRole,
    NotWritable,
    UnsupportedServer,
    evaluate_mysql_server,
    evaluate_node_role,
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


GALERA = {**DURABLE, "wsrep_on": "ON", "binlog_format": "ROW", "innodb_autoinc_lock_mode": "2"}


def test_galera_with_safe_settings_is_accepted() -> None:
    assert evaluate_mysql_server("10.11.6-MariaDB", GALERA).warnings == ()


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("binlog_format", "MIXED", "binlog_format=ROW"),
        ("innodb_autoinc_lock_mode", "1", "innodb_autoinc_lock_mode=2"),
        ("wsrep_certify_nonpk", "OFF", "wsrep_certify_nonPK"),
        ("default_storage_engine", "MyISAM", "InnoDB"),
    ],
)
def test_galera_with_unsafe_settings_is_refused(setting: str, value: str, says: str) -> None:
    with pytest.raises(UnsupportedServer, match=says):
        evaluate_mysql_server("10.11.6-MariaDB", {**GALERA, setting: value})


SYNCED = {"wsrep_ready": "ON", "wsrep_local_state": "4", "wsrep_cluster_status": "Primary"}


def test_a_writable_server_is_a_primary() -> None:
    assert evaluate_node_role({"read_only": "OFF"}, {}) == NodeRole(PRIMARY)
    assert evaluate_node_role({}, {}) == NodeRole(PRIMARY)  # MySQL without the variables


@pytest.mark.parametrize("flag", ["read_only", "super_read_only"])
def test_a_read_only_server_is_not_writable(flag: str) -> None:
    with pytest.raises(NotWritable, match=f"read-only \\({flag}=ON\\)"):
        evaluate_node_role({flag: "ON"}, {})


def test_a_synced_galera_node_in_the_primary_component_is_writable() -> None:
    role = evaluate_node_role({"wsrep_on": "ON"}, {**SYNCED, "wsrep_cluster_size": "3"})
    assert role == NodeRole(GALERA_SYNCED, "cluster size 3")


@pytest.mark.parametrize(
    ("status", "says"),
    [
        ({"wsrep_ready": "OFF"}, "not ready"),
        ({"wsrep_cluster_status": "non-Primary"}, "not in the primary component"),
        ({"wsrep_local_state": "2"}, "not synced \\(wsrep_local_state=2"),  # donor/joiner
        ({"wsrep_local_state": "1"}, "not synced"),  # joining
    ],
)
def test_a_galera_node_that_is_not_synced_primary_is_not_writable(
    status: dict[str, str], says: str
) -> None:
    with pytest.raises(NotWritable, match=says):
        evaluate_node_role({"wsrep_on": "ON"}, {**SYNCED, **status})


def test_a_read_only_galera_node_is_not_writable() -> None:
    with pytest.raises(NotWritable, match="read-only"):
        evaluate_node_role({"wsrep_on": "ON", "read_only": "ON"}, SYNCED)


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
