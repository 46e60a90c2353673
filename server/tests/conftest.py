"""Fixtures shared by the server's tests.

Behavioural tests take the ``db`` fixture, which runs each test on both dialects: a migrated
SQLite file of its own and a migrated, empty database on a real MariaDB server that the run
starts itself (or on ``ORBIT_TEST_MYSQL_URL``). Nothing here mocks the database. The MariaDB
server starts only when a test needs it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx2
import pytest

from orbit_server.api.app import OrbitApp
from orbit_server.audit import Actor
from orbit_server.bootstrap import build_node
from orbit_server.clock import FakeClock
from orbit_server.config import Settings
from orbit_server.governance.keys import Role
from orbit_server.runtime.node import Node
from orbit_server.scope import Scope
from orbit_server.store import Database, open_database
from tests.support.databases import (
    MigratedMySQLDatabases,
    MySQLServerForTests,
    SQLiteTemplate,
    mysql_server_for_tests,
)

DIALECTS = ("sqlite", "mariadb")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "covers(*names): store methods a conformance test covers")


@pytest.fixture(scope="session")
def mysql_server() -> Iterator[MySQLServerForTests]:
    with mysql_server_for_tests() as server:
        yield server


@pytest.fixture(scope="session")
def migrated_mysql(mysql_server: MySQLServerForTests) -> Iterator[MigratedMySQLDatabases]:
    databases = MigratedMySQLDatabases(mysql_server)
    yield databases
    if mysql_server.harness is None:  # a server of others: leave nothing behind
        asyncio.run(databases.drop_all())


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> SQLiteTemplate:
    return SQLiteTemplate(tmp_path_factory.mktemp("sqlite-template"))


@pytest.fixture
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A URL of an empty database of the dialect named by ``request.param``."""
    dialect = getattr(request, "param", "sqlite")
    if dialect == "sqlite":
        yield f"sqlite:///{tmp_path / 'orbit.db'}"
        return
    mysql_server: MySQLServerForTests = request.getfixturevalue("mysql_server")
    name = await mysql_server.create()
    try:
        yield mysql_server.url_for(name)
    finally:
        await mysql_server.drop(name)


@pytest.fixture(params=DIALECTS)
async def empty_db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    """A connected backend on an empty (unmigrated) database, for each dialect."""
    mysql_server: MySQLServerForTests | None = None
    name = None
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'orbit.db'}"
    else:
        mysql_server = request.getfixturevalue("mysql_server")
        name = await mysql_server.create()
        url = mysql_server.url_for(name)
    db = open_database(url, pool_max=8)
    await db.connect()
    try:
        yield db
    finally:
        await db.close()
        if mysql_server is not None and name is not None:
            await mysql_server.drop(name)


@pytest.fixture(params=DIALECTS)
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    """A connected, migrated backend holding no rows, for each dialect.

    The migrations ran once per test process: SQLite tests get a copy of a migrated file,
    MariaDB tests a migrated database that the test before emptied.
    """
    migrated: MigratedMySQLDatabases | None = None
    name = None
    if request.param == "sqlite":
        path = tmp_path / "orbit.db"
        template: SQLiteTemplate = request.getfixturevalue("sqlite_template")
        await template.copy_to(path)
        url = f"sqlite:///{path}"
    else:
        migrated = request.getfixturevalue("migrated_mysql")
        name = await migrated.borrow()
        url = migrated.server.url_for(name)
    db = open_database(url, pool_max=8)
    try:
        await db.connect()
        yield db
    finally:
        await db.close()
        if migrated is not None and name is not None:
            await migrated.give_back(name)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def settings() -> Settings:
    return Settings.load(
        environ={}, flags={"max_body_bytes": 64 * 1024, "max_params_bytes": 16 * 1024}
    )


@pytest.fixture
async def node(db: Database, settings: Settings, clock: FakeClock) -> Node:
    return await build_node(settings, db=db, clock=clock)


@pytest.fixture
async def http(node: Node) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.ASGITransport(app=OrbitApp(node))
    async with httpx2.AsyncClient(transport=transport, base_url="http://orbit.test") as client:
        yield client


SCOPE = Scope("acme", "prod")
OTHER_TENANT = Scope("globex", "prod")
OTHER_ENV = Scope("acme", "staging")


async def make_key(
    node: Node, scope: Scope = SCOPE, *roles: Role, queues: tuple[str, ...] | None = None
) -> str:
    created = await node.keys.create(
        scope, roles or (Role.ADMIN,), actor=Actor("test"), queues=queues
    )
    return created.token


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
