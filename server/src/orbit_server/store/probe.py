"""Startup checks of a MySQL-family server (DATABASE.md): pure evaluation of what it reports."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from orbit_server.store.base import ServerInfo


class UnsupportedServer(Exception):
    """The database server cannot hold Orbit's guarantees; the message says why and what to do."""


_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)")

# Oldest releases with SELECT ... FOR UPDATE SKIP LOCKED, below which claims are unsafe.
_SKIP_LOCKED = {"mariadb": (10, 6, 0), "mysql": (8, 0, 1)}
# Oldest releases Orbit is tested against (SPEC: MySQL 8.4+, MariaDB 10.11+).
_SUPPORTED = {"mariadb": (10, 11, 0), "mysql": (8, 4, 0)}


def server_version(version: str) -> tuple[str, tuple[int, int, int]]:
    """("mariadb" | "mysql", (major, minor, patch)) of a ``VERSION()`` string."""
    flavour = "mariadb" if "mariadb" in version.lower() else "mysql"
    match = _VERSION.match(version)
    if match is None:
        raise UnsupportedServer(f"cannot read the database server version {version!r}")
    return flavour, (int(match[1]), int(match[2]), int(match[3]))


def isolation_variable(version: str) -> str:
    """The session variable holding the isolation level (MariaDB before 11.1: tx_isolation)."""
    flavour, found = server_version(version)
    return (
        "tx_isolation" if flavour == "mariadb" and found < (11, 1, 0) else "transaction_isolation"
    )


def evaluate_mysql_server(version: str, variables: Mapping[str, str]) -> ServerInfo:
    """Refuse servers that break Orbit's guarantees; warn on non-durable settings.

    ``variables`` maps lower-case global variable names to their values as the server prints
    them (``SHOW GLOBAL VARIABLES``); absent variables are treated as unset.
    """
    flavour, found = server_version(version)
    name = "MariaDB" if flavour == "mariadb" else "MySQL"
    needed = _SKIP_LOCKED[flavour]
    if found < needed:
        raise UnsupportedServer(
            f"{name} {'.'.join(map(str, found))} has no SKIP LOCKED; Orbit needs "
            f"MySQL 8.4+ or MariaDB 10.11+"
        )
    warnings: list[str] = []
    if found < _SUPPORTED[flavour]:
        warnings.append(
            f"{name} {'.'.join(map(str, found))} is older than the supported "
            f"{'.'.join(map(str, _SUPPORTED[flavour]))}; upgrade the server"
        )

    def value(var: str) -> str:
        return variables.get(var, "").strip().upper()

    if value("wsrep_on") == "ON":
        _check_galera(value)
    binlog_on = value("log_bin") == "ON"
    if value("binlog_format") == "STATEMENT":
        message = (
            "binlog_format=STATEMENT cannot replicate SKIP LOCKED claims safely; "
            "set binlog_format=ROW (or MIXED)"
        )
        if binlog_on:
            raise UnsupportedServer(message)
        warnings.append(message + " before enabling the binary log")
    if value("innodb_flush_log_at_trx_commit") not in ("", "1"):
        warnings.append(
            "innodb_flush_log_at_trx_commit is not 1: acknowledged changes can be lost on a crash"
        )
    if binlog_on and value("sync_binlog") not in ("", "1"):
        warnings.append("sync_binlog is not 1: the binary log can lose acknowledged changes")
    return ServerInfo(dialect="mysql", version=version, warnings=tuple(warnings))


def _check_galera(value: Callable[[str], str]) -> None:
    """Galera is accepted when its settings keep Orbit's guarantees with one writer node at a
    time (docs/operations/database-ha.md); refused with the setting to change otherwise."""
    if value("binlog_format") not in ("", "ROW"):
        raise UnsupportedServer(
            f"Galera with binlog_format={value('binlog_format')} does not replicate every row "
            "change; set binlog_format=ROW"
        )
    if value("innodb_autoinc_lock_mode") not in ("", "2"):
        raise UnsupportedServer(
            "Galera needs innodb_autoinc_lock_mode=2 (interleaved): other modes can deadlock "
            "or diverge under parallel appliers; set it on every node"
        )
    if value("wsrep_certify_nonpk") == "OFF":
        raise UnsupportedServer(
            "Galera with wsrep_certify_nonPK=OFF does not certify every write; set it to ON"
        )
    if value("default_storage_engine") not in ("", "INNODB"):
        raise UnsupportedServer(
            "Galera replicates InnoDB tables only; set default_storage_engine=InnoDB"
        )


@dataclass(frozen=True, slots=True)
class NodeRole:
    """What a node is for Orbit: ``primary`` (a writable server) or ``galera synced``."""

    role: str
    detail: str = ""


PRIMARY = "primary"
GALERA_SYNCED = "galera synced"


class NotWritable(Exception):
    """The node answers but must not take Orbit's writes now (a replica, or a Galera node that
    is not synced in the primary component); the message says which and why."""


def evaluate_node_role(variables: Mapping[str, str], status: Mapping[str, str]) -> NodeRole:
    """Whether a node may take Orbit's writes (SPEC S2: never decide on a lagging replica).

    ``variables``: lower-case global variable names to values (``read_only``,
    ``super_read_only``, ``wsrep_on``); ``status``: lower-case global status names to values
    (``wsrep_ready``, ``wsrep_local_state``, ``wsrep_cluster_status``, ``wsrep_cluster_size``).
    """

    def value(source: Mapping[str, str], name: str) -> str:
        return source.get(name, "").strip().upper()

    for flag in ("read_only", "super_read_only"):
        if value(variables, flag) not in ("", "OFF", "0", "NO"):
            raise NotWritable(f"the node is read-only ({flag}={value(variables, flag)})")
    if value(variables, "wsrep_on") != "ON":
        return NodeRole(PRIMARY)
    if value(status, "wsrep_ready") != "ON":
        raise NotWritable("the Galera node is not ready (wsrep_ready is not ON)")
    if value(status, "wsrep_cluster_status") != "PRIMARY":
        found = value(status, "wsrep_cluster_status") or "unknown"
        raise NotWritable(f"the Galera node is not in the primary component ({found})")
    if value(status, "wsrep_local_state") != "4":
        found = value(status, "wsrep_local_state") or "unknown"
        raise NotWritable(f"the Galera node is not synced (wsrep_local_state={found}, not 4)")
    size = status.get("wsrep_cluster_size", "").strip()
    return NodeRole(GALERA_SYNCED, f"cluster size {size}" if size else "")


def evaluate_sqlite_version(version: str) -> ServerInfo:
    """SQLite needs RETURNING (3.35) for claims."""
    parts = tuple(int(p) for p in version.split(".")[:3])
    if parts < (3, 35, 0):
        raise UnsupportedServer(f"SQLite {version} is too old; Orbit needs 3.35 or newer")
    return ServerInfo(dialect="sqlite", version=version)
