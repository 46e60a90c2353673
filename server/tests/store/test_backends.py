"""The storage seam's transaction contract, on every dialect (and MySQL-only where stated)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncmy
import pytest

from orbit_server.clock import FakeClock
from orbit_server.errors import CommitOutcomeUnknown, DatabaseUnavailable
from orbit_server.scope import Scope
from orbit_server.store import Database, RetryPolicy, Tx, open_database
from orbit_server.store import governance as gov
from orbit_server.store.migrate import migrate
from orbit_server.store.mysql_backend import MySQLDatabase
from orbit_server.store.sqlite_backend import InstanceLocked, SQLiteDatabase
from orbit_server.store.url import MySQLUrl, parse_database_url
from tests.harness.mariadb import free_port
from tests.store.test_governance_store import key
from tests.support.databases import MySQLServerForTests


@contextlib.asynccontextmanager
async def tuned_mysql(
    server: MySQLServerForTests, clock: FakeClock, **options: Any
) -> AsyncIterator[MySQLDatabase]:
    """A migrated MariaDB database with backend options of the test's own, holding key "k"."""
    name = await server.create()
    parsed = parse_database_url(server.url_for(name))
    assert isinstance(parsed, MySQLUrl)
    db = MySQLDatabase(parsed, **options)
    try:
        await db.connect()
        await migrate(db)
        await db.run(lambda tx: gov.key_insert(tx, key("k", clock)))
        yield db
    finally:
        await db.close()
        await server.drop(name)


async def wait_for_lock_waiters(db: Database, count: int) -> None:
    """Poll InnoDB until ``count`` transactions on ``db``'s database wait for a row lock (the
    server's own state; those of other tests' databases do not count)."""
    assert isinstance(db, MySQLDatabase)
    admin = await asyncmy.connect(**{**db.connection_kwargs(), "autocommit": True})
    try:
        async with asyncio.timeout(10):
            while True:
                async with admin.cursor() as cursor:
                    await cursor.execute(
                        "SELECT COUNT(*) FROM information_schema.INNODB_TRX t"
                        " JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id"
                        " WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()"
                    )
                    row = await cursor.fetchone()
                if row[0] >= count:
                    return
                # InnoDB refreshes this table's cache only after 100 ms without a read.
                await asyncio.sleep(0.15)
    finally:
        admin.close()


def mysql_only(db: Database, reason: str) -> None:
    if db.dialect != "mysql":
        pytest.skip(reason)


async def environments(db: Database) -> list[Scope]:
    return await db.read(gov.environment_list)


async def test_a_failing_unit_is_rolled_back(db: Database, clock: FakeClock) -> None:
    async def unit(tx: Tx) -> None:
        await gov.environment_ensure(tx, Scope("acme", "prod"), clock.now())
        raise RuntimeError("business rule says no")

    with pytest.raises(RuntimeError, match="business rule"):
        await db.run(unit)
    assert await environments(db) == []


async def test_a_duplicate_leaves_the_transaction_usable(db: Database, clock: FakeClock) -> None:
    async def unit(tx: Tx) -> None:
        await gov.tenant_ensure(tx, "acme", clock.now())
        with pytest.raises(gov.DuplicateKey):
            await tx.execute("tenant_insert", {"name": "acme", "created_at": clock.now()})
        await gov.environment_ensure(tx, Scope("acme", "prod"), clock.now())

    await db.run(unit)
    assert await environments(db) == [Scope("acme", "prod")]


async def test_every_pooled_connection_reads_committed(db: Database) -> None:
    mysql_only(db, "isolation levels are a MySQL/MariaDB setting; SQLite serialises writers")
    assert isinstance(db, MySQLDatabase)

    async def session(tx: Tx) -> tuple[str, int]:
        # The seam has no query for session variables; the test reads them directly.
        async with tx._conn.cursor() as cursor:  # type: ignore[attr-defined]
            await cursor.execute(
                f"SELECT @@SESSION.{db.isolation_variable}, @@SESSION.innodb_lock_wait_timeout"
            )
            row = await cursor.fetchone()
        return str(row[0]), int(row[1])

    sessions = await asyncio.gather(*(db.read(session) for _ in range(6)))
    assert set(sessions) == {("READ-COMMITTED", 5)}


async def test_deadlocked_units_are_retried_whole(db: Database, clock: FakeClock) -> None:
    mysql_only(db, "SQLite has one writer at a time and cannot deadlock")

    async def seed(tx: Tx) -> None:
        await gov.key_insert(tx, key("a", clock))
        await gov.key_insert(tx, key("b", clock))

    await db.run(seed)
    attempts = {"a": 0, "b": 0}
    both_hold_their_first_row = asyncio.Barrier(2)

    def crossing(first: str, second: str) -> Callable[[Tx], Awaitable[None]]:
        async def unit(tx: Tx) -> None:
            attempts[first] += 1
            await gov.key_revoke(tx, first, clock.now())
            if attempts[first] == 1:
                await both_hold_their_first_row.wait()
            await gov.key_revoke(tx, second, clock.now())

        return unit

    await asyncio.gather(db.run(crossing("a", "b")), db.run(crossing("b", "a")))
    assert sorted(attempts.values()) == [1, 2]  # exactly one deadlock victim, retried whole


async def test_exhausted_retries_answer_unavailable(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "busy.db"
    db = SQLiteDatabase(
        path, busy_timeout_ms=20, retry=RetryPolicy(max_attempts=3, base_delay_s=0.001)
    )
    await db.connect()
    await migrate(db)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:

        async def unit(tx: Tx) -> None:
            await gov.tenant_ensure(tx, "acme", clock.now())

        with pytest.raises(DatabaseUnavailable):
            await db.run(unit)
        blocker.execute("ROLLBACK")
        await db.run(unit)  # the same unit goes through once the writer is gone
    finally:
        blocker.close()
        await db.close()


async def test_a_lost_commit_is_reported_as_unknown(db: Database, clock: FakeClock) -> None:
    mysql_only(db, "SQLite commits in-process; a connection cannot be killed under it")
    assert isinstance(db, MySQLDatabase)
    admin = await asyncmy.connect(**{**db.connection_kwargs(), "autocommit": True})

    async def unit(tx: Tx) -> None:
        await gov.tenant_ensure(tx, "acme", clock.now())
        row = await tx.fetch_one("connection_id")
        assert row is not None
        async with admin.cursor() as cursor:
            await cursor.execute(f"KILL {int(row['id'])}")

    try:
        with pytest.raises(CommitOutcomeUnknown):
            await db.run(unit)
    finally:
        admin.close()
    # The pool recovers: the next unit gets a healthy connection.
    assert await environments(db) == []


async def test_an_unreachable_server_is_unavailable_not_a_driver_error() -> None:
    db = open_database(f"mysql://root@127.0.0.1:{free_port()}/orbit", connect_timeout_s=1)
    with pytest.raises(DatabaseUnavailable) as raised:
        await db.connect()
    assert "asyncmy" not in str(raised.value).lower()
    with pytest.raises(DatabaseUnavailable):
        await db.ping()
    await db.close()


async def test_a_second_sqlite_server_on_one_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "orbit.db"
    first = SQLiteDatabase(path, exclusive=True)
    await first.connect()
    second = SQLiteDatabase(path, exclusive=True)
    with pytest.raises(InstanceLocked):
        await second.connect()
    await first.close()
    await second.connect()  # free again once the first has gone
    await second.close()


async def test_the_probe_reads_the_real_server(db: Database) -> None:
    info = await db.connect()
    assert info.dialect == db.dialect

    async def version(tx: Tx) -> str:
        row = await tx.fetch_one("server_version")
        assert row is not None
        return str(row["version"])

    assert info.version == await db.read(version)
    assert re.match(r"^\d+\.\d+\.\d+", info.version)


async def test_lock_wait_timeouts_are_retried_whole(
    mysql_server: MySQLServerForTests, clock: FakeClock
) -> None:
    async with tuned_mysql(mysql_server, clock, lock_wait_timeout_s=1) as db:
        holder_has_lock, waiter_attempts = asyncio.Event(), [0]
        release = asyncio.Event()

        async def holder(tx: Tx) -> None:
            await gov.key_revoke(tx, "k", clock.now())
            holder_has_lock.set()
            await release.wait()

        async def waiter(tx: Tx) -> bool:
            waiter_attempts[0] += 1
            if waiter_attempts[0] == 2:
                release.set()  # the first attempt timed out (1205) and was retried
            return await gov.key_revoke(tx, "k", clock.now())

        holding = asyncio.create_task(db.run(holder))
        await holder_has_lock.wait()
        changed = await db.run(waiter)
        await holding
        assert waiter_attempts[0] >= 2
        assert changed is False  # the holder's revoke committed first; the retry saw it


async def test_a_stale_pooled_connection_is_replaced_once(db: Database) -> None:
    mysql_only(db, "SQLite has no server connections to lose")
    assert isinstance(db, MySQLDatabase)

    async def my_connection(tx: Tx) -> int:
        row = await tx.fetch_one("connection_id")
        assert row is not None
        return int(row["id"])

    first = await db.read(my_connection)
    admin = await asyncmy.connect(**{**db.connection_kwargs(), "autocommit": True})
    try:
        async with admin.cursor() as cursor:
            await cursor.execute(f"KILL {first}")
    finally:
        admin.close()
    second = await db.read(my_connection)  # the pooled connection was dead: one retry
    assert second != first


async def test_cancelling_a_blocked_unit_propagates_and_keeps_the_pool_healthy(
    db: Database, clock: FakeClock
) -> None:
    mysql_only(db, "SQLite units run to completion on their thread; nothing blocks mid-unit")
    await db.run(lambda tx: gov.key_insert(tx, key("k", clock)))
    locked, release = asyncio.Event(), asyncio.Event()

    async def holder(tx: Tx) -> None:
        await gov.key_revoke(tx, "k", clock.now())
        locked.set()
        await release.wait()

    async def blocked(tx: Tx) -> None:
        await gov.key_revoke(tx, "k", clock.now())

    holding = asyncio.create_task(db.run(holder))
    try:
        await locked.wait()
        victim = asyncio.create_task(db.run(blocked))
        await wait_for_lock_waiters(db, 1)
        victim.cancel()
        with pytest.raises(asyncio.CancelledError):
            await victim
    finally:
        release.set()
        await holding
    found = await db.read(lambda tx: gov.key_get(tx, "k"))
    assert found is not None and found.revoked_at is not None
    assert await environments(db) == []  # the pool still serves units


async def test_closing_sqlite_finishes_accepted_units_then_refuses(
    tmp_path: Path, clock: FakeClock
) -> None:
    db = SQLiteDatabase(tmp_path / "orbit.db")
    await db.connect()
    await migrate(db)

    async def slow(tx: Tx) -> None:
        await gov.tenant_ensure(tx, "acme", clock.now())
        await asyncio.sleep(0.01)  # yields on the database thread: later units queue up

    units = [asyncio.create_task(db.run(slow)) for _ in range(10)]
    await asyncio.sleep(0)
    await db.close()
    results = await asyncio.gather(*units, return_exceptions=True)
    assert results == [None] * 10  # units handed over before close() ran to completion
    with pytest.raises(DatabaseUnavailable):
        await db.run(slow)


async def test_an_overrunning_unit_is_abandoned_with_503(
    mysql_server: MySQLServerForTests, clock: FakeClock
) -> None:
    async with tuned_mysql(mysql_server, clock, unit_timeout_s=0.5) as db:
        locked, release = asyncio.Event(), asyncio.Event()

        async def holder(tx: Tx) -> None:
            await gov.key_revoke(tx, "k", clock.now())
            locked.set()
            await release.wait()

        holding = asyncio.create_task(db.run(holder, timeout_s=30))
        try:
            await locked.wait()
            with pytest.raises(DatabaseUnavailable, match="in time"):
                await db.run(lambda tx: gov.key_revoke(tx, "k", clock.now()))
        finally:
            release.set()
            await holding
        assert await db.read(gov.environment_list) == []  # the pool is healthy afterwards


async def test_closing_mysql_does_not_wait_long_for_a_connection_never_given_back(
    mysql_server: MySQLServerForTests, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pooled connection that never comes back (its unit was cancelled while the pool
    handed it out) is closed after a short grace, not after a unit's timeout."""
    from orbit_server.store import mysql_backend

    monkeypatch.setattr(mysql_backend, "CLOSE_GRACE_S", 0.2)
    async with tuned_mysql(mysql_server, clock, unit_timeout_s=3600) as db:
        pool = db._pool
        assert pool is not None
        leaked = await pool.acquire()  # taken and never released
        await db.close()
        assert not leaked.connected  # terminated with the pool; the server rolls back its work
