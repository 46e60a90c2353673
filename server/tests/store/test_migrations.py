"""Migrations: numbered files reproduce schema.sql, run once, and guard concurrent runs."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from orbit_server.store import Database, Tx, open_database
from orbit_server.store.migrate import (
    MigrationError,
    load_migrations,
    load_schema,
    migrate,
    schema_status,
)
from orbit_server.store.sql import Dialect, Query, QueryBook, parse_queries
from tests.support.databases import MySQLServerForTests

RUNNER_TABLE = "orbit_schema_migrations"


async def dump_schema(db: Database) -> dict[str, Any]:
    """A comparable description of every table (but the runner's own) and its indexes."""

    async def unit(tx: Tx) -> dict[str, Any]:
        tables = [str(r["name"]) for r in await tx.fetch_all("schema_tables")]
        out: dict[str, Any] = {}
        for table in tables:
            if table == RUNNER_TABLE:
                continue
            out[table] = await _describe(tx, db.dialect, table)
        return out

    return await db.read(unit)


async def _describe(tx: Any, dialect: str, table: str) -> Any:
    # Raw introspection statements, test-only, on identifiers read from the catalogue.
    conn = tx._conn
    if dialect == "mysql":
        async with conn.cursor() as cursor:
            await cursor.execute(f"SHOW CREATE TABLE `{table}`")
            row = await cursor.fetchone()
        return re.sub(r" AUTO_INCREMENT=\d+", "", row[1])
    columns = conn.execute(f"PRAGMA table_info('{table}')").fetchall()
    indexes = []
    for index in conn.execute(f"PRAGMA index_list('{table}')").fetchall():
        cols = [c[2] for c in conn.execute(f"PRAGMA index_info('{index[1]}')").fetchall()]
        indexes.append((index[1], index[2], cols))
    return {"columns": columns, "indexes": sorted(indexes)}


@pytest.fixture
async def twin(
    empty_db: Database, tmp_path: Path, mysql_server: MySQLServerForTests
) -> AsyncIterator[Database]:
    """A second empty database of the same dialect."""
    if empty_db.dialect == "sqlite":
        other = open_database(f"sqlite:///{tmp_path / 'twin.db'}")
        name = None
    else:
        name = await mysql_server.create()
        other = open_database(mysql_server.url_for(name))
    await other.connect()
    try:
        yield other
    finally:
        await other.close()
        if name is not None:
            await mysql_server.drop(name)


async def test_migrations_reproduce_schema_sql(empty_db: Database, twin: Database) -> None:
    await migrate(empty_db)

    async def apply_schema(tx: Tx) -> None:
        await tx.execute_script(load_schema(twin.dialect))

    await twin.run(apply_schema)
    migrated, declared = await dump_schema(empty_db), await dump_schema(twin)
    assert migrated == declared
    assert migrated  # not trivially equal


async def test_migrate_applies_once_then_is_a_no_op(empty_db: Database) -> None:
    before = await schema_status(empty_db)
    assert not before.current and len(before.pending) == len(load_migrations(empty_db.dialect))
    applied = await migrate(empty_db)
    assert [m.version for m in applied] == [m.version for m in load_migrations(empty_db.dialect)]
    assert await migrate(empty_db) == []
    after = await schema_status(empty_db)
    assert after.current and after.pending == () and after.mismatched == ()


async def test_concurrent_migrators_apply_each_migration_once(
    empty_db: Database, tmp_path: Path, mysql_server: MySQLServerForTests
) -> None:
    url = _url_of(empty_db)
    others = [open_database(url) for _ in range(3)]
    for other in others:
        await other.connect()
    try:
        results = await asyncio.gather(migrate(empty_db), *(migrate(o) for o in others))
    finally:
        for other in others:
            await other.close()
    applied = [m.version for result in results for m in result]
    assert sorted(applied) == [m.version for m in load_migrations(empty_db.dialect)]
    assert (await schema_status(empty_db)).current


async def test_an_edited_migration_is_refused(empty_db: Database) -> None:
    await migrate(empty_db)

    async def tamper(tx: Tx) -> None:
        await tx.execute_script([f"UPDATE {RUNNER_TABLE} SET checksum = 'x' WHERE version = 1"])

    await empty_db.run(tamper)
    status = await schema_status(empty_db)
    assert not status.current and status.mismatched == (1,)
    with pytest.raises(MigrationError, match="differ"):
        await migrate(empty_db)


async def test_newer_migrations_from_a_newer_release_are_tolerated(empty_db: Database) -> None:
    await migrate(empty_db)

    async def newer(tx: Tx) -> None:
        await tx.execute(
            "migration_record",
            {"version": 9999, "name": "future", "checksum": "f" * 64, "applied_at": _now()},
        )

    await empty_db.run(newer)
    status = await schema_status(empty_db)
    assert status.current and status.unknown == (9999,)


def test_dialects_have_the_same_migration_numbers() -> None:
    mysql = [(m.version, m.name) for m in load_migrations("mysql")]
    sqlite = [(m.version, m.name) for m in load_migrations("sqlite")]
    assert mysql == sqlite and mysql


# Queries that only one dialect needs, each with its reason.
DIALECT_ONLY = {
    "migration_lock_acquire": "SQLite serialises migrators with a file lock",
    "migration_lock_release": "SQLite serialises migrators with a file lock",
    "connection_id": "SQLite has no server connections",
    "server_variables": "the startup probe of MySQL-family servers reads global variables",
    "node_variables": "a MySQL-family node may be read-only (a replica): checked at readiness",
    "node_status": "a Galera node may be unsynced or out of the primary component",
    "tables_unsafe_for_galera": "Galera needs InnoDB tables with primary keys",
}


def test_both_dialects_name_the_same_queries() -> None:
    mysql, sqlite = QueryBook.load("mysql").names(), QueryBook.load("sqlite").names()
    assert mysql ^ sqlite == set(DIALECT_ONLY)


# Queries written per dialect whose parameters differ, each with its reason; their callers
# branch on the dialect.
PARAMETERS_DIFFER = {
    "ready_delete_many": "MySQL/MariaDB joins the ids as a JSON_TABLE (a DELETE takes no "
    "index hint, and a scan would wait on other claims' rows); SQLite takes the list",
    "schedules_advance": "MySQL/MariaDB updates all rows from one JSON_TABLE; SQLite, per row",
    "task_results_set": "MySQL/MariaDB updates all rows from one JSON_TABLE; SQLite, per row",
    "workflow_steps_update_many": "MySQL/MariaDB updates all rows from one JSON_TABLE; SQLite, "
    "per row",
    "workflows_update_many": "MySQL/MariaDB updates all rows from one JSON_TABLE; SQLite, per row",
}


def _dialect_queries(dialect: Dialect) -> dict[str, Query]:
    """The queries of the dialect's own folder (not common/)."""
    folder = resources.files("orbit_server.store").joinpath(dialect)
    return {
        q.name: q
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
        for q in parse_queries(entry.read_text("utf-8"), dialect)
    }


def test_a_query_written_per_dialect_takes_the_same_parameters_on_both() -> None:
    mysql, sqlite = _dialect_queries("mysql"), _dialect_queries("sqlite")
    both = mysql.keys() & sqlite.keys()
    assert both
    differ = {
        name: (sorted(set(mysql[name].params)), sorted(set(sqlite[name].params)))
        for name in both
        if set(mysql[name].params) != set(sqlite[name].params)
    }
    assert differ.keys() == PARAMETERS_DIFFER.keys(), differ


def _url_of(db: Database) -> str:
    from orbit_server.store.mysql_backend import MySQLDatabase
    from orbit_server.store.sqlite_backend import SQLiteDatabase

    if isinstance(db, SQLiteDatabase):
        return f"sqlite:///{db.path}"
    assert isinstance(db, MySQLDatabase)
    u = db.url
    return f"mysql://{u.user}:{u.password}@{u.host}:{u.port}/{u.database}"


def _now() -> Any:
    from orbit_server.clock import SystemClock

    return SystemClock().now()
