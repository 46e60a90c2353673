"""A database URL with several hosts: the pools use the first writable primary, skip hosts
that are down or read-only, and move to another when the one in use stops taking writes
(docs/operations/database-ha.md). Two private MariaDB servers, no replication between them:
what is under test is the choice of node, not the copying of data."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from orbit_server.errors import DatabaseUnavailable
from orbit_server.observability.metrics import Metrics
from orbit_server.runtime.health import ReadinessProbe
from orbit_server.store.base import Tx
from orbit_server.store.migrate import migrate
from orbit_server.store.mysql_backend import MySQLDatabase
from orbit_server.store.url import MySQLUrl, parse_database_url
from tests.harness.mariadb import DEFAULT_DATABASE, MariaDBServer, free_port

# Not an administrator: read_only binds it (root holds READ_ONLY ADMIN and writes anyway).
USER = "orbit_app"


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[MariaDBServer, MariaDBServer]]:
    with MariaDBServer() as first, MariaDBServer() as second:
        for server in (first, second):
            server._run_sql(
                f"CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY 'pw';"
                f"GRANT ALL PRIVILEGES ON {DEFAULT_DATABASE}.* TO '{USER}'@'127.0.0.1';"
                f"CREATE TABLE {DEFAULT_DATABASE}.ha_probe (id INT AUTO_INCREMENT PRIMARY KEY,"
                " port INT NOT NULL);"
            )
        yield first, second


def url_of(*ports: int) -> MySQLUrl:
    hosts = ",".join(f"127.0.0.1:{port}" for port in ports)
    parsed = parse_database_url(f"mysql://{USER}:pw@{hosts}/{DEFAULT_DATABASE}")
    assert isinstance(parsed, MySQLUrl)
    return parsed


def read_only(server: MariaDBServer, on: bool) -> None:
    server._run_sql(f"SET GLOBAL read_only = {'ON' if on else 'OFF'};")


@pytest.fixture(autouse=True)
def writable(servers: tuple[MariaDBServer, MariaDBServer]) -> Iterator[None]:
    for server in servers:
        read_only(server, False)
    yield
    for server in servers:
        read_only(server, False)


async def test_hosts_that_are_down_or_read_only_are_skipped(
    servers: tuple[MariaDBServer, MariaDBServer],
) -> None:
    first, second = servers
    read_only(first, True)
    db = MySQLDatabase(url_of(free_port(), first.port, second.port), connect_timeout_s=2)
    try:
        await db.connect()
        assert db.database_node() == (f"127.0.0.1:{second.port}", "primary")
        assert await written_to(db, servers) == second.port
    finally:
        await db.close()


async def test_a_node_made_read_only_is_left_for_the_next_writable_one(
    servers: tuple[MariaDBServer, MariaDBServer],
) -> None:
    first, second = servers
    db = MySQLDatabase(url_of(first.port, second.port), pool_max=4)
    try:
        await db.connect()
        assert await written_to(db, servers) == first.port
        read_only(first, True)
        # The write is refused (1290): the pools are dropped, the retry picks the next host.
        assert await written_to(db, servers) == second.port
        assert db.database_node() == (f"127.0.0.1:{second.port}", "primary")
        read_only(first, False)
        assert await written_to(db, servers) == second.port  # no going back while this one works
    finally:
        await db.close()


async def test_readiness_names_the_node_and_turns_down_when_it_becomes_read_only(
    servers: tuple[MariaDBServer, MariaDBServer],
) -> None:
    first, _ = servers
    db = MySQLDatabase(url_of(first.port))
    probe = ReadinessProbe(db, Metrics())
    try:
        await db.connect()
        await migrate(db)
        ready = await probe.check()
        assert ready.checks["database_node"] == f"127.0.0.1:{first.port}"
        assert ready.checks["database_role"] == "primary"
        read_only(first, True)
        refused = await probe.check()
        assert not refused.ready
        assert refused.checks["database"] == "not writable"
        assert "read-only (read_only=ON)" in (refused.reason or "")
        assert db.database_node() is None  # dropped: the next unit chooses again
        with pytest.raises(DatabaseUnavailable):
            await db.run(write)
        read_only(first, False)
        assert (await probe.check()).ready
    finally:
        await db.close()


async def test_a_node_that_stops_answering_is_left_when_readiness_times_out(
    servers: tuple[MariaDBServer, MariaDBServer],
) -> None:
    """A frozen node (SIGSTOP: its connections neither answer nor fail) would hold every unit
    until it woke; the readiness check's timeout leaves it, and it is tried last."""
    first, second = servers
    db = MySQLDatabase(url_of(first.port, second.port), connect_timeout_s=1)
    assert first._process is not None
    try:
        await db.connect()
        assert await written_to(db, servers) == first.port
        os.kill(first._process.pid, signal.SIGSTOP)
        try:
            with pytest.raises(DatabaseUnavailable, match="did not answer in time"):
                await db.ping()
            assert db.database_node() is None  # dropped: the next unit chooses again
            await db.run(write)  # on the second: the frozen one comes last
            assert db.database_node() == (f"127.0.0.1:{second.port}", "primary")
        finally:
            os.kill(first._process.pid, signal.SIGCONT)
        assert rows(second) >= 1 and await written_to(db, servers) == second.port
    finally:
        await db.close()


async def test_a_single_read_only_host_is_refused_at_connect(
    servers: tuple[MariaDBServer, MariaDBServer],
) -> None:
    first, _ = servers
    read_only(first, True)
    db = MySQLDatabase(url_of(first.port))
    try:
        with pytest.raises(DatabaseUnavailable, match=r"read-only \(read_only=ON\)"):
            await db.connect()
    finally:
        await db.close()


async def test_no_writable_host_names_what_each_one_is(
    servers: tuple[MariaDBServer, MariaDBServer],
) -> None:
    first, second = servers
    read_only(first, True)
    read_only(second, True)
    dead = free_port()
    db = MySQLDatabase(url_of(first.port, dead), connect_timeout_s=2)
    try:
        with pytest.raises(DatabaseUnavailable) as refused:
            await db.connect()
    finally:
        await db.close()
    assert refused.value.message == (
        f"no database host is a writable primary: 127.0.0.1:{first.port}: the node is "
        f"read-only (read_only=ON); 127.0.0.1:{dead}: cannot connect to the database at "
        f"127.0.0.1:{dead}"
    )


async def write(tx: Tx) -> None:
    """A write (a read-only node refuses it) that records which server took it."""
    await tx.execute_script(["INSERT INTO ha_probe (port) VALUES (@@port)"])


async def written_to(db: MySQLDatabase, servers: tuple[MariaDBServer, ...]) -> int:
    """Run ``write``; answers the port of the one server whose table gained the row."""
    before = [rows(s) for s in servers]
    await db.run(write)
    gained = [s.port for s, b in zip(servers, before, strict=True) if rows(s) == b + 1]
    assert len(gained) == 1, gained
    return gained[0]


def rows(server: MariaDBServer) -> int:
    return int(server._run_sql(f"SELECT COUNT(*) FROM {DEFAULT_DATABASE}.ha_probe;").strip())
