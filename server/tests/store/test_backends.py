"""The storage seam's transaction contract, on every dialect (and MySQL-only where stated)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncmy
import pytest

from orbit_server.clock import FakeClock
from orbit_server.errors import CommitOutcomeUnknown, DatabaseUnavailable
from orbit_server.scope import Scope
from orbit_server.store import Database, RetryPolicy, Tx, open_database
from orbit_server.store import governance as gov
from orbit_server.store.base import TransientConflict
from orbit_server.store.migrate import migrate
from orbit_server.store.mysql_backend import MySQLDatabase
from orbit_server.store.sqlite_backend import InstanceLocked, SQLiteDatabase
from tests.harness.mariadb import free_port


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
        async with tx._conn.cursor() as cursor:  # type: ignore[attr-defined]  # noqa: SLF001
            await cursor.execute(
                f"SELECT @@SESSION.{db.isolation_variable}, @@SESSION.innodb_lock_wait_timeout"
            )
            row = await cursor.fetchone()
        return str(row[0]), int(row[1])

    sessions = await asyncio.gather(*(db.read(session) for _ in range(6)))
    assert set(sessions) == {("READ-COMMITTED", 5)}


async def test_deadlocked_units_are_retried_whole(db: Database, clock: FakeClock) -> None:
    mysql_only(db, "SQLite has one writer at a time and cannot deadlock")
    from tests.store.test_governance_store import key

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
    if db.dialect == "mysql":
        assert "mariadb" in info.version.lower() or info.version[0].isdigit()


async def test_transient_conflict_is_internal_to_the_seam() -> None:
    # The retry vocabulary never leaks: exhausted conflicts become DatabaseUnavailable.
    assert not issubclass(TransientConflict, DatabaseUnavailable)
