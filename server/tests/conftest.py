"""Fixtures shared by the server's tests.

Behavioural tests take the ``db`` fixture, which runs each test on both dialects: a fresh
SQLite file and a fresh database on a real MariaDB server that the run starts itself (or on
``ORBIT_TEST_MYSQL_URL``). Nothing here mocks the database.
"""

from __future__ import annotations

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
from orbit_server.store.migrate import migrate
from tests.support.databases import MySQLServerForTests, mysql_server_for_tests

DIALECTS = ("sqlite", "mariadb")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "covers(*names): store methods a conformance test covers")


@pytest.fixture(scope="session")
def mysql_server() -> Iterator[MySQLServerForTests]:
    with mysql_server_for_tests() as server:
        yield server


@pytest.fixture
async def database_url(
    request: pytest.FixtureRequest, tmp_path: Path, mysql_server: MySQLServerForTests
) -> AsyncIterator[str]:
    """A URL of an empty database of the dialect named by ``request.param``."""
    dialect = getattr(request, "param", "sqlite")
    if dialect == "sqlite":
        yield f"sqlite:///{tmp_path / 'orbit.db'}"
        return
    name = await mysql_server.create()
    try:
        yield mysql_server.url_for(name)
    finally:
        await mysql_server.drop(name)


@pytest.fixture(params=DIALECTS)
async def empty_db(
    request: pytest.FixtureRequest, tmp_path: Path, mysql_server: MySQLServerForTests
) -> AsyncIterator[Database]:
    """A connected backend on an empty (unmigrated) database, for each dialect."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'orbit.db'}"
        name = None
    else:
        name = await mysql_server.create()
        url = mysql_server.url_for(name)
    db = open_database(url, pool_max=8)
    await db.connect()
    try:
        yield db
    finally:
        await db.close()
        if name is not None:
            await mysql_server.drop(name)


@pytest.fixture
async def db(empty_db: Database) -> Database:
    """A connected, migrated backend, for each dialect."""
    await migrate(empty_db)
    return empty_db


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
