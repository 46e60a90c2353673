"""Test databases: a private MariaDB server (or ORBIT_TEST_MYSQL_URL) and SQLite files.

Migrating a database costs far more than most tests, so each test process migrates once per
dialect and then hands out copies: on SQLite a copy of a migrated template file, on MariaDB a
migrated database that the previous test emptied. Only the tables the test wrote to are
truncated (about 1 ms each, where ``CREATE DATABASE`` plus the migrations plus ``DROP`` take
80 ms and truncating all 22 tables 14 ms). ``TRUNCATE`` rather than ``DELETE``: it recreates the
table, so its optimizer statistics and ``AUTO_INCREMENT`` counter start afresh too (the plan
tests read statistics; the rows a previous test deleted would change their plans). A database
whose schema a test changed is dropped instead of reused, so the next test still starts from
the migrated schema and no rows.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncmy

from orbit_server.store import open_database
from orbit_server.store.migrate import migrate
from tests.harness.mariadb import MariaDBServer

_counter = itertools.count(1)

# Tables whose rows migrations write: the test's database keeps them.
_KEPT_TABLES = frozenset({"orbit_schema_migrations"})
# What a test may have changed besides rows; equal before and after means the schema is intact.
_SCHEMA_FINGERPRINT = (
    "SELECT 'column', COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS('|', TABLE_NAME, COLUMN_NAME,"
    " ORDINAL_POSITION, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, EXTRA, COLLATION_NAME))), 0)"
    " FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()"
    " UNION ALL "
    "SELECT 'index', COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS('|', TABLE_NAME, INDEX_NAME,"
    " SEQ_IN_INDEX, COLUMN_NAME, NON_UNIQUE, SUB_PART))), 0)"
    " FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE()"
    " UNION ALL "
    "SELECT 'table', COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS('|', TABLE_NAME, TABLE_TYPE,"
    " ENGINE, TABLE_COLLATION))), 0)"
    " FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()"
    " UNION ALL "
    "SELECT 'trigger', COUNT(*), 0 FROM information_schema.TRIGGERS"
    " WHERE TRIGGER_SCHEMA = DATABASE()"
    " UNION ALL "
    "SELECT 'routine', COUNT(*), 0 FROM information_schema.ROUTINES"
    " WHERE ROUTINE_SCHEMA = DATABASE()"
    " UNION ALL "
    "SELECT 'migrations', COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS('|', version, name, checksum))),"
    " 0) FROM orbit_schema_migrations"
)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class MySQLServerForTests:
    """Creates a fresh database per test on one server for the whole run."""

    def __init__(self, base_url: str, harness: MariaDBServer | None = None) -> None:
        self.base_url = base_url
        self.harness = harness
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 3306
        self.user = parts.username or "root"
        self.password = parts.password or ""
        self.prefix = f"orbit_t{os.getpid()}_"

    def url_for(self, database: str) -> str:
        parts = urlsplit(self.base_url)
        return urlunsplit((parts.scheme, parts.netloc, "/" + database, "", ""))

    async def connect(self, database: str | None = None) -> Any:
        """An autocommit connection of the server's administrator, to ``database`` if given."""
        return await asyncmy.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            db=database,
            autocommit=True,
        )

    async def _admin(self, statement: str) -> None:
        conn = await self.connect()
        try:
            async with conn.cursor() as cursor:
                await cursor.execute(statement)
        finally:
            conn.close()

    async def create(self) -> str:
        name = f"{self.prefix}{next(_counter)}"
        await self._admin(f"DROP DATABASE IF EXISTS `{name}`")
        await self._admin(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        return name

    async def drop(self, name: str) -> None:
        await self._admin(f"DROP DATABASE IF EXISTS `{name}`")


class MigratedMySQLDatabases:
    """Migrated databases on one server that tests borrow one at a time.

    :meth:`give_back` truncates every table the test wrote to, then checks that the schema
    still is the one migrations made; if it is not, or emptying fails, the database is dropped
    and a later :meth:`borrow` migrates a new one.
    """

    def __init__(self, server: MySQLServerForTests) -> None:
        self.server = server
        self._free: list[str] = []
        self._all: set[str] = set()
        # Learnt from the first migrated database.
        self._fingerprint: tuple[Any, ...] | None = None
        self._probe = ""

    async def borrow(self) -> str:
        """The name of a migrated database holding no rows but the migrations' own."""
        if self._free:
            return self._free.pop()
        name = await self.server.create()
        self._all.add(name)
        db = open_database(self.server.url_for(name), pool_max=2)
        await db.connect()
        try:
            await migrate(db)
        finally:
            await db.close()
        if self._fingerprint is None:
            await self._learn(name)
        return name

    async def give_back(self, name: str) -> None:
        """Empty ``name`` for the next test, or drop it when it cannot be reused."""
        try:
            reusable = await self._empty(name)
        except Exception:
            reusable = False
        if reusable:
            self._free.append(name)
            return
        self._all.discard(name)
        await self.server.drop(name)

    async def drop_all(self) -> None:
        for name in sorted(self._all):
            await self.server.drop(name)
        self._all.clear()
        self._free.clear()

    async def _learn(self, name: str) -> None:
        conn = await self.server.connect(name)
        try:
            async with conn.cursor() as cursor:
                await cursor.execute(
                    "SELECT TABLE_NAME FROM information_schema.TABLES"
                    " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_TYPE = 'BASE TABLE'"
                )
                tables = [str(row[0]) for row in await cursor.fetchall()]
                await cursor.execute(_SCHEMA_FINGERPRINT)
                fingerprint = tuple(tuple(row) for row in await cursor.fetchall())
        finally:
            conn.close()
        emptied = sorted(t for t in tables if t not in _KEPT_TABLES)
        self._probe = " UNION ALL ".join(
            f"SELECT '{t}' FROM DUAL WHERE EXISTS (SELECT 1 FROM {_quote(t)})" for t in emptied
        )
        self._fingerprint = fingerprint

    async def _empty(self, name: str) -> bool:
        conn = await self.server.connect(name)
        try:
            async with conn.cursor() as cursor:
                # A connection of the test still open in a transaction (a killed server's, not
                # yet noticed) would hold TRUNCATE for the default year: give up, and drop.
                await cursor.execute("SET SESSION lock_wait_timeout = 10")
                await cursor.execute(self._probe)
                written = [str(row[0]) for row in await cursor.fetchall()]
                await cursor.execute("SET SESSION FOREIGN_KEY_CHECKS = 0")
                for table in written:
                    await cursor.execute(f"TRUNCATE TABLE {_quote(table)}")
                await cursor.execute(self._probe)
                left = await cursor.fetchall()
                await cursor.execute(_SCHEMA_FINGERPRINT)
                fingerprint = tuple(tuple(row) for row in await cursor.fetchall())
        finally:
            conn.close()
        return not left and fingerprint == self._fingerprint


def memory_backed_dir() -> Path | None:
    """The shared-memory file system (tmpfs) when it is there with room to spare."""
    shm = Path("/dev/shm")  # noqa: S108 - a private directory is made inside
    try:
        usable = os.access(shm, os.W_OK | os.X_OK) and shutil.disk_usage(shm).free > 1 << 30
    except OSError:
        return None
    return shm if usable else None


class SQLiteFiles:
    """The SQLite files of one test process's tests, each removed after its test.

    They live in ``directory``; in memory-backed storage (tmpfs), where SQLite's ``fsync`` on
    every commit costs nothing, the SQLite tests take about half the time they take on disk.
    :meth:`migrated` copies a migrated template file, made on first use, instead of migrating.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._template = directory / "template.db"
        self._made = False
        self._names = itertools.count(1)

    def empty(self) -> Path:
        """A path for a new SQLite file (none exists there yet)."""
        return self.directory / f"test-{next(self._names)}.db"

    async def migrated(self) -> Path:
        """A new SQLite file holding the migrated schema and no rows."""
        if not self._made:
            db = open_database(f"sqlite:///{self._template}")
            await db.connect()
            try:
                await migrate(db)
            finally:
                await db.close()
            # Closing the last connection checkpoints the WAL into the file and removes it.
            assert not self._template.with_name(self._template.name + "-wal").exists()
            self._made = True
        path = self.empty()
        shutil.copyfile(self._template, path)
        return path

    def remove(self, path: Path) -> None:
        """Delete the file and whatever SQLite and Orbit put beside it."""
        for found in self.directory.glob(glob.escape(path.name) + "*"):
            found.unlink(missing_ok=True)


@contextmanager
def mysql_server_for_tests() -> Iterator[MySQLServerForTests]:
    external = os.environ.get("ORBIT_TEST_MYSQL_URL")
    if external:
        yield MySQLServerForTests(external)
        return
    with MariaDBServer() as server:
        yield MySQLServerForTests(server.url(), server)
