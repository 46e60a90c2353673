"""Versioned migrations (SPEC S4): numbered ``.sql`` files per dialect, one guarded entry point.

``orbit migrate`` is the only code path that changes a schema. Concurrent runs serialise on
``GET_LOCK`` (MySQL/MariaDB; released if the session dies) or a file lock (SQLite); the loser
then finds everything applied and does nothing. Servers only *check* the schema.

MariaDB commits each DDL statement by itself, so a migration that fails midway stays half
applied; every statement is therefore written to be re-runnable (``IF NOT EXISTS``), and the
migration's row is recorded only after all its statements succeeded.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from orbit_server.clock import Clock, SystemClock
from orbit_server.store.base import Database, Tx
from orbit_server.store.sql import Dialect, split_statements

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
LOCK_TIMEOUT_S = 300


class MigrationError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    checksum: str
    statements: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AppliedMigration:
    version: int
    name: str
    checksum: str
    applied_at: datetime


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    known: tuple[Migration, ...]
    applied: tuple[AppliedMigration, ...]
    pending: tuple[Migration, ...] = field(default=())
    mismatched: tuple[int, ...] = field(default=())
    unknown: tuple[int, ...] = field(default=())

    @property
    def current(self) -> bool:
        """All known migrations applied unchanged. Versions newer than this build are tolerated:
        they come from a newer release's expand step, which old servers must survive (S4)."""
        return not self.pending and not self.mismatched

    def describe(self) -> str:
        if self.mismatched:
            versions = ", ".join(f"{v:04d}" for v in self.mismatched)
            return (
                f"applied migrations {versions} differ from this release's files; "
                "is this the release that migrated this database?"
            )
        if self.pending:
            return f"{len(self.pending)} migration(s) not applied; run `orbit migrate` first"
        return "schema is current"


def _read_dir(dialect: Dialect) -> dict[str, str]:
    folder = resources.files("orbit_server.migrations").joinpath(dialect)
    return {e.name: e.read_text("utf-8") for e in folder.iterdir() if e.name.endswith(".sql")}


@cache
def load_migrations(dialect: Dialect) -> tuple[Migration, ...]:
    found: list[Migration] = []
    for filename, text in _read_dir(dialect).items():
        match = _FILE.match(filename)
        if match is None:
            continue
        checksum = hashlib.sha256(text.encode()).hexdigest()
        found.append(Migration(int(match[1]), match[2], checksum, tuple(split_statements(text))))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise MigrationError(f"{dialect} migrations must be numbered 0001, 0002, … without gaps")
    return tuple(found)


@cache
def load_schema(dialect: Dialect) -> tuple[str, ...]:
    return tuple(split_statements(_read_dir(dialect)["schema.sql"]))


async def schema_status(db: Database) -> SchemaStatus:
    known = load_migrations(db.dialect)

    async def read(tx: Tx) -> list[dict[str, Any]]:
        exists = await tx.fetch_one("migrations_table_exists")
        if not exists or not int(exists["n"]):
            return []
        return await tx.fetch_all("migrations_applied")

    rows = await db.read(read)
    applied = tuple(
        AppliedMigration(int(r["version"]), str(r["name"]), str(r["checksum"]), r["applied_at"])
        for r in rows
    )
    by_version = {a.version: a for a in applied}
    known_versions = {m.version for m in known}
    return SchemaStatus(
        known=known,
        applied=applied,
        pending=tuple(m for m in known if m.version not in by_version),
        mismatched=tuple(
            m.version
            for m in known
            if m.version in by_version and by_version[m.version].checksum != m.checksum
        ),
        unknown=tuple(v for v in by_version if v not in known_versions),
    )


@contextlib.asynccontextmanager
async def migration_lock(db: Database, *, timeout_s: float = LOCK_TIMEOUT_S) -> AsyncIterator[None]:
    """Serialise migrators of one database: GET_LOCK on a dedicated session (MySQL family),
    or a file lock beside the SQLite file. Waits at most ``timeout_s``."""
    if db.dialect == "sqlite":
        from orbit_server.store.sqlite_backend import SQLiteDatabase

        assert isinstance(db, SQLiteDatabase)
        fd = await _file_lock(db.path.with_name(db.path.name + ".migrate.lock"), timeout_s)
        try:
            yield
        finally:
            os.close(fd)
        return
    from orbit_server.store.mysql_backend import MySQLDatabase, translated

    assert isinstance(db, MySQLDatabase)
    conn = await db.open_connection()
    try:
        sql, args = db.queries.bind("migration_lock_acquire", {"timeout_s": int(timeout_s)})
        async with conn.cursor() as cursor:
            await translated(cursor.execute(sql, args))
            row = await cursor.fetchone()
        if not row or row[0] != 1:
            raise MigrationError("another `orbit migrate` holds the lock; try again later")
        try:
            yield
        finally:
            sql, args = db.queries.bind("migration_lock_release", {})
            async with conn.cursor() as cursor:
                await translated(cursor.execute(sql, args))
    finally:
        conn.close()


async def _file_lock(path: Path, timeout_s: float) -> int:
    """Poll a non-blocking flock so that waiting can be cancelled and bounded."""
    from orbit_server.store.sqlite_backend import InstanceLocked, acquire_file_lock

    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        try:
            return acquire_file_lock(path)
        except InstanceLocked:
            if asyncio.get_running_loop().time() >= deadline:
                raise MigrationError(
                    "another `orbit migrate` holds the lock; try again later"
                ) from None
            await asyncio.sleep(0.05)


async def migrate(db: Database, clock: Clock | None = None) -> list[Migration]:
    """Apply every pending migration in order; answers those applied (empty when current)."""
    clock = clock or SystemClock()
    async with migration_lock(db):

        async def create_table(tx: Tx) -> None:
            exists = await tx.fetch_one("migrations_table_exists")
            if not exists or not int(exists["n"]):
                await tx.execute("migrations_table_create")

        await db.run(create_table)
        status = await schema_status(db)
        if status.mismatched:
            raise MigrationError(status.describe())
        for migration in status.pending:

            async def apply(tx: Tx, m: Migration = migration) -> None:
                await tx.execute_script(m.statements)
                await tx.execute(
                    "migration_record",
                    {
                        "version": m.version,
                        "name": m.name,
                        "checksum": m.checksum,
                        "applied_at": clock.now(),
                    },
                )

            await db.run(apply, timeout_s=24 * 3600)
        return list(status.pending)
