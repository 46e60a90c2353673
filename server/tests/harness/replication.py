"""A MariaDB primary and a replica on 127.0.0.1, GTID replication, semi-synchronous or not,
each its own ``mariadbd`` with its own data directory and port::

    with ReplicatedPair(semi_sync=True) as pair:
        url = pair.url()  # mysql://root@127.0.0.1:PRIMARY,127.0.0.1:REPLICA/orbit_test
        pair.primary.kill()  # kill -9
        pair.promote()  # the replica becomes the writable primary

The replica runs ``read_only=ON`` until it is promoted, so Orbit never writes to it before
then (it refuses a read-only node). Semi-synchronous replication waits, before a COMMIT
returns, until the replica has the transaction in its relay log (``AFTER_SYNC``: no other
session sees it first); the wait gives up after ``semi_sync_timeout_ms`` and the primary
goes on asynchronously, so that figure bounds how long a dead replica stalls commits.
``promote()`` is the operator's procedure of docs/operations/database-ha.md.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import quote

from .mariadb import DEFAULT_DATABASE
from .nodes import ClusterNode, query

__all__ = ["ReplicatedPair"]

_CATCH_UP_TIMEOUT_S = 60.0


class ReplicatedPair:
    def __init__(
        self,
        *,
        semi_sync: bool = True,
        semi_sync_timeout_ms: int = 10_000,
        base_dir: Path | None = None,
    ) -> None:
        self.semi_sync = semi_sync
        self.semi_sync_timeout_ms = semi_sync_timeout_ms
        self.primary = ClusterNode("primary", lambda: self._options(1), base_dir)
        self.replica = ClusterNode("replica", lambda: self._options(2), base_dir)
        self.promoted = False

    def _options(self, server_id: int) -> Sequence[str]:
        common = [
            f"--server-id={server_id}",
            "--log-bin=binlog",
            "--binlog-format=ROW",
            "--log-slave-updates=ON",
            "--sync-binlog=1",
            "--innodb-flush-log-at-trx-commit=1",
            "--innodb-log-file-size=16M",
            "--slave-parallel-threads=0",
        ]
        if server_id == 1:
            return [
                *common,
                f"--rpl-semi-sync-master-enabled={'ON' if self.semi_sync else 'OFF'}",
                f"--rpl-semi-sync-master-timeout={self.semi_sync_timeout_ms}",
                "--rpl-semi-sync-master-wait-point=AFTER_SYNC",
            ]
        if self.promoted:  # the new primary: restarted, it stays writable (the procedure's
            return common  # "set read_only=OFF in its configuration file too")
        return [
            *common,
            f"--rpl-semi-sync-slave-enabled={'ON' if self.semi_sync else 'OFF'}",
            "--read-only=ON",
            "--skip-slave-start",
        ]

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start both servers; the replica follows the primary from its first transaction."""
        self.primary.start()
        self.replica.start()
        # Forget what the replica's own first start wrote: it replays the primary's instead.
        self.replica.sql("RESET MASTER; SET GLOBAL gtid_slave_pos = '';")
        self.replica.sql(
            "CHANGE MASTER TO MASTER_HOST='127.0.0.1', "
            f"MASTER_PORT={self.primary.port}, MASTER_USER='root', MASTER_PASSWORD='', "
            "MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1; START SLAVE;"
        )
        self.wait_caught_up()
        if self.semi_sync:
            self._wait_semi_sync_on()

    def _wait_semi_sync_on(self) -> None:
        deadline = time.monotonic() + _CATCH_UP_TIMEOUT_S
        while self.status(self.primary, "Rpl_semi_sync_master_status") != "ON":
            if time.monotonic() > deadline:
                raise RuntimeError("semi-synchronous replication did not switch on")
            time.sleep(0.05)

    @staticmethod
    def status(node: ClusterNode, name: str) -> str:
        rows = query(node, f"SHOW GLOBAL STATUS LIKE '{name}'")
        return rows[0][1] if rows and len(rows[0]) > 1 else ""

    def wait_caught_up(self) -> None:
        """Until the replica has applied everything the primary has written."""
        deadline = time.monotonic() + _CATCH_UP_TIMEOUT_S
        while True:
            [[wanted]] = query(self.primary, "SELECT @@gtid_binlog_pos")
            [[applied]] = query(self.replica, "SELECT @@gtid_slave_pos")
            if wanted == applied:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replica is at {applied!r}, the primary at {wanted!r}")
            time.sleep(0.05)

    def promote(self) -> float:
        """Make the replica the primary, as an operator does after the primary died: let it
        apply what it received, stop replicating, forget the old primary, accept writes.
        Answers the seconds it took."""
        started = time.monotonic()
        deadline = started + _CATCH_UP_TIMEOUT_S
        # The SQL thread applies what the IO thread had received before the primary died.
        while True:
            rows = query(
                self.replica,
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST"
                " WHERE COMMAND = 'Slave_SQL' AND STATE NOT LIKE '%has read all relay log%'",
            )
            if rows == [["0"]] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.replica.sql(
            "STOP SLAVE; RESET SLAVE ALL; "
            "SET GLOBAL rpl_semi_sync_slave_enabled = OFF; SET GLOBAL read_only = OFF;"
        )
        self.promoted = True
        return time.monotonic() - started

    def cleanup(self) -> None:
        self.replica.cleanup()
        self.primary.cleanup()

    def url(self, database: str = DEFAULT_DATABASE) -> str:
        """The primary first, then the replica."""
        hosts = f"{self.primary.endpoint()},{self.replica.endpoint()}"
        return f"mysql://root@{hosts}/{quote(database, safe='')}"

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()
