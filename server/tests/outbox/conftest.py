"""Fixtures of the outbox tests: business databases of each dialect (a fresh database with the
``orbit_outbox`` table per test, on a real server), connections to them through DB-API and
SQLAlchemy, and a real Orbit node in this process that the relay reaches over ASGI.

PostgreSQL is a server this run starts (or ``ORBIT_TEST_POSTGRES_URL``), MariaDB the run's
MariaDB server (or ``ORBIT_TEST_MYSQL_URL``), SQLite a file.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx2
import psycopg
import pymysql
import pytest
import sqlalchemy

from orbit_sdk import AsyncClient
from orbit_sdk.outbox import ddl_statements
from orbit_server.bootstrap import build_node
from orbit_server.config import Settings
from orbit_server.governance.keys import Role
from orbit_server.store import open_database
from tests.conftest import SCOPE, make_key, orbit_app
from tests.harness.postgresql import postgres_url_for_tests
from tests.support.databases import MySQLServerForTests, SQLiteFiles
from tests.support.processes import OrbitProcess

DIALECTS = ("sqlite", "postgresql", "mariadb")
ACCESS = [(dialect, via) for dialect in DIALECTS for via in ("dbapi", "sqlalchemy")]


class FakeClock:
    """The relay's clock: moves only when told. It starts 30 s ahead of the real clock, so
    that the rows a test writes (stamped by the real one) are due at once."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC) + timedelta(seconds=30)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture(scope="session")
def orbit_dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One ``orbit dev`` process for the tests of a test process that need a real server
    (each uses queues of its own); answers its ``ORBIT_URL`` and ``ORBIT_API_KEY``."""
    data_dir = tmp_path_factory.mktemp("orbit-dev")
    process = OrbitProcess(["dev", "--data-dir", str(data_dir), "--port", "0"])
    try:
        yield dict(process.wait_for("ORBIT_URL", "ORBIT_API_KEY"))
    finally:
        assert process.stop() == 0


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """A PostgreSQL database of this test process's own, dropped at the end."""
    name = f"orbit_outbox_{os.getpid()}"
    with postgres_url_for_tests() as base:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield _with_database(base, name)
        finally:
            with psycopg.connect(base, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _drop_tables(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS orbit_outbox, orders")


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, "", ""))


def _dialect_of(url: str) -> str:
    scheme = urlsplit(url).scheme
    return "postgresql" if scheme.startswith("postgres") else scheme


def create_table(url: str) -> None:
    conn = connect(url)
    try:
        cursor = conn.cursor()
        for statement in ddl_statements(_dialect_of(url)):
            cursor.execute(statement)
        conn.commit()
    finally:
        conn.close()


@pytest.fixture
async def business_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The URL of a fresh business database of dialect ``request.param`` with the table."""
    dialect = getattr(request, "param", "sqlite")
    if dialect == "sqlite":
        url = f"sqlite:///{tmp_path / 'business.db'}"
        create_table(url)
        yield url
        return
    if dialect == "postgresql":
        url = request.getfixturevalue("postgres_database")
        _drop_tables(url)  # a database per test process, emptied for each test: faster
        create_table(url)
        yield url
        return
    server: MySQLServerForTests = request.getfixturevalue("mysql_server")
    name = await server.create()
    url = server.url_for(name)
    create_table(url)
    try:
        yield url
    finally:
        await server.drop(name)


def connect(url: str) -> Any:
    """A plain DB-API connection to ``url``, in a transaction that the caller commits."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        return sqlite3.connect(parts.path[1:])
    if parts.scheme.startswith("postgres"):
        return psycopg.connect(url)
    return pymysql.connect(
        host=parts.hostname,
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
        database=parts.path.lstrip("/"),
    )


def sqlalchemy_engine(url: str) -> sqlalchemy.Engine:
    scheme = urlsplit(url).scheme
    driver = {"sqlite": "sqlite", "mysql": "mysql+pymysql"}.get(scheme, "postgresql+psycopg")
    return sqlalchemy.create_engine(driver + url[len(scheme) :], poolclass=sqlalchemy.NullPool)


def rows(url: str, where: str = "1 = 1") -> list[dict[str, Any]]:
    """The outbox rows, by id, as dicts."""
    conn = connect(url)
    try:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT id, aggregate_key, attempts, delivered_at, parked_at, last_error, result,"
            f" claimed_by FROM orbit_outbox WHERE {where} ORDER BY id"
        )
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    finally:
        conn.close()


@pytest.fixture
async def orbit(sqlite_files: SQLiteFiles) -> AsyncIterator[Callable[..., AsyncClient]]:
    """Makes clients of a real Orbit node in this process (its own SQLite database); a
    client's ``transport_wrapper`` may stand between the client and Orbit."""
    path = await sqlite_files.migrated()
    db = open_database(f"sqlite:///{path}", pool_max=4)
    await db.connect()
    node = await build_node(Settings.load(environ={}), db=db)
    key = await make_key(node, SCOPE, Role.SUBMITTER, Role.OPERATOR)
    app = orbit_app(node)
    clients: list[AsyncClient] = []

    def make(wrap: Callable[[httpx2.AsyncBaseTransport], Any] | None = None) -> AsyncClient:
        transport: Any = httpx2.ASGITransport(app=app)
        if wrap is not None:
            transport = wrap(transport)
        client = AsyncClient("http://orbit.test", key, transport=transport)
        clients.append(client)
        return client

    try:
        yield make
    finally:
        for client in clients:
            await client.aclose()
        await db.close()
        sqlite_files.remove(path)
