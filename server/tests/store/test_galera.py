"""Orbit's backend on a real 3-node Galera cluster: accepted when its settings are safe,
refused with the table at fault when not, moved to another node when the one in use dies, and
correct when two writers conflict (a certification failure is a retried deadlock).

Starting the cluster takes about ten seconds: these run only with ``ORBIT_TEST_FAILOVER=1``
(with the failover scenarios of tests/e2e/test_database_failover.py)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest

from orbit_server.errors import DatabaseBusy
from orbit_server.store.base import Tx
from orbit_server.store.migrate import migrate
from orbit_server.store.mysql_backend import MySQLDatabase
from orbit_server.store.probe import UnsupportedServer
from orbit_server.store.url import MySQLUrl, parse_database_url
from tests.harness.galera import GaleraCluster
from tests.harness.nodes import ClusterNode, query

pytestmark = [
    pytest.mark.skipif(
        not os.environ.get("ORBIT_TEST_FAILOVER"),
        reason="starts a Galera cluster: set ORBIT_TEST_FAILOVER=1",
    ),
    pytest.mark.timeout(600),
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[GaleraCluster]:
    with GaleraCluster() as started:
        started.nodes[0].sql(
            "CREATE TABLE orbit_test.ha_counter (id INT PRIMARY KEY, n INT NOT NULL);"
            "INSERT INTO orbit_test.ha_counter VALUES (1, 0);"
        )
        yield started


def backend(cluster: GaleraCluster, *nodes: ClusterNode, **options: Any) -> MySQLDatabase:
    url = parse_database_url(cluster.url(nodes=nodes))
    assert isinstance(url, MySQLUrl)
    return MySQLDatabase(url, **options)


async def bump(tx: Tx) -> None:
    await tx.execute_script(["UPDATE ha_counter SET n = n + 1 WHERE id = 1"])


def counter(node: ClusterNode) -> int:
    return int(query(node, "SELECT n FROM orbit_test.ha_counter WHERE id = 1")[0][0])


def conflicts(cluster: GaleraCluster) -> int:
    total = 0
    for node in cluster.nodes:
        for _, value in query(
            node,
            "SHOW GLOBAL STATUS WHERE Variable_name IN"
            " ('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')",
        ):
            total += int(value)
    return total


async def test_galera_is_accepted_and_reads_wait_for_the_cluster(cluster: GaleraCluster) -> None:
    a, b, c = cluster.nodes
    db = backend(cluster, a, b, c)
    try:
        info = await db.connect()
        await migrate(db)  # every table of Orbit's schema is InnoDB with a primary key
        assert info.warnings == ()
        assert db.database_node() == (a.endpoint(), "galera synced")
        pool = await db._ensure_pool()
        conn = await pool.acquire()
        try:
            async with conn.cursor() as cursor:
                await cursor.execute("SELECT @@SESSION.wsrep_sync_wait")
                assert (await cursor.fetchone())[0] & 1 == 1
        finally:
            pool.release(conn)
    finally:
        await db.close()


async def test_a_table_without_primary_key_is_refused(cluster: GaleraCluster) -> None:
    a = cluster.nodes[0]
    a.sql("CREATE TABLE orbit_test.ha_loose (v INT) ENGINE=InnoDB;")
    try:
        db = backend(cluster, a)
        with pytest.raises(UnsupportedServer, match=r"ha_loose \(InnoDB, no primary key\)"):
            await db.connect()
        await db.close()
    finally:
        a.sql("DROP TABLE orbit_test.ha_loose;")


async def test_two_writers_on_two_nodes_conflict_and_stay_correct(cluster: GaleraCluster) -> None:
    """Eight writers on one row through two nodes: the worst case of multi-writer Galera.
    Every conflict is a deadlock (at a statement or at COMMIT), rolled back and retried; a
    unit whose retries run out is refused (503) and left nothing behind."""
    a, b, c = cluster.nodes
    first, second = backend(cluster, b, a, c), backend(cluster, c, a, b)
    before_n, before_conflicts = counter(a), conflicts(cluster)
    done = refused = 0

    async def bumps(db: MySQLDatabase, count: int) -> None:
        nonlocal done, refused
        for _ in range(count):
            try:
                await db.run(bump)
            except DatabaseBusy:
                refused += 1
            else:
                done += 1

    try:
        await asyncio.gather(first.connect(), second.connect())
        assert first.database_node() == (b.endpoint(), "galera synced")
        assert second.database_node() == (c.endpoint(), "galera synced")
        await asyncio.gather(*(bumps(db, 20) for db in (first, second) for _ in range(4)))
    finally:
        await asyncio.gather(first.close(), second.close())
    cluster.wait_synced(cluster.nodes)
    assert done + refused == 160 and done > 0
    assert counter(a) - before_n == done  # each unit counted once: none lost or doubled
    assert conflicts(cluster) > before_conflicts  # and they did conflict on the way
    print(f"two writers, one row: {done} done, {refused} refused after retries")


async def test_the_node_in_use_dies_and_the_next_one_takes_the_writes(
    cluster: GaleraCluster,
) -> None:
    a, b, c = cluster.nodes
    db = backend(cluster, a, b, c)
    try:
        await db.connect()
        before = counter(b)
        a.kill()
        await db.run(bump)  # the lost connection is retried on the next node
        assert db.database_node() == (b.endpoint(), "galera synced")
        assert counter(b) == before + 1
    finally:
        await db.close()
        cluster.start(a, donor=c)
