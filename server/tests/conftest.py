"""Fixtures shared by the server's tests.

Behavioural tests take the ``db`` fixture, which runs each test on both dialects: a migrated
SQLite file of its own and a migrated, empty database on a real MariaDB server that the run
starts itself (or on ``ORBIT_TEST_MYSQL_URL``). Nothing here mocks the database. The MariaDB
server starts only when a test needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import httpx2
import pytest
import structlog
from litestar import Litestar

from orbit_server.api.app import OrbitApp, build_litestar
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
    SQLiteFiles,
    memory_backed_dir,
    mysql_server_for_tests,
)

DIALECTS = ("sqlite", "mariadb")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "covers(*names): store methods a conformance test covers")
    # The services log through structlog's default pipeline here (a server configures its
    # own). Its console renderer draws an exception with Rich, source highlighted and locals
    # shown: over a second of CPU for each exception a test makes a service log.
    processors = [
        p
        for p in structlog.get_config()["processors"]
        if not isinstance(p, structlog.dev.ConsoleRenderer)
    ]
    renderer = structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)
    structlog.configure(processors=[*processors, renderer])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the end-to-end tests first. They are few and long (real servers, workers and
    benchmarks); with several test processes (xdist hands tests out in collection order),
    starting them early keeps one of them from being the last thing a run waits for."""
    items.sort(key=lambda item: item.path.parent.name != "e2e")


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
def sqlite_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SQLiteFiles]:
    shm = memory_backed_dir()
    if shm is None:
        yield SQLiteFiles(tmp_path_factory.mktemp("sqlite"))
        return
    directory = Path(tempfile.mkdtemp(prefix="orbit-sqlite-", dir=shm))
    try:
        yield SQLiteFiles(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
async def database_url(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A URL of an empty database of the dialect named by ``request.param``."""
    dialect = getattr(request, "param", "sqlite")
    if dialect == "sqlite":
        files: SQLiteFiles = request.getfixturevalue("sqlite_files")
        path = files.empty()
        try:
            yield f"sqlite:///{path}"
        finally:
            files.remove(path)
        return
    mysql_server: MySQLServerForTests = request.getfixturevalue("mysql_server")
    name = await mysql_server.create()
    try:
        yield mysql_server.url_for(name)
    finally:
        await mysql_server.drop(name)


@pytest.fixture(params=DIALECTS)
async def empty_db(request: pytest.FixtureRequest) -> AsyncIterator[Database]:
    """A connected backend on an empty (unmigrated) database, for each dialect."""
    async with _database(request, migrated=False) as db:
        yield db


@pytest.fixture(params=DIALECTS)
async def db(request: pytest.FixtureRequest) -> AsyncIterator[Database]:
    """A connected, migrated backend holding no rows, for each dialect.

    The migrations ran once per test process: SQLite tests get a copy of a migrated file,
    MariaDB tests a migrated database that the test before emptied.
    """
    async with _database(request, migrated=True) as db:
        yield db


@contextlib.asynccontextmanager
async def _database(request: pytest.FixtureRequest, *, migrated: bool) -> AsyncIterator[Database]:
    """A connected backend of the dialect ``request.param``; its database is the test's own."""
    release: Callable[[], Awaitable[None]]
    if request.param == "sqlite":
        files: SQLiteFiles = request.getfixturevalue("sqlite_files")
        path = await files.migrated() if migrated else files.empty()
        url = f"sqlite:///{path}"

        async def release() -> None:
            files.remove(path)

    elif migrated:
        pool: MigratedMySQLDatabases = request.getfixturevalue("migrated_mysql")
        name = await pool.borrow()
        url = pool.server.url_for(name)

        async def release() -> None:
            await pool.give_back(name)

    else:
        server: MySQLServerForTests = request.getfixturevalue("mysql_server")
        name = await server.create()
        url = server.url_for(name)

        async def release() -> None:
            await server.drop(name)

    db = open_database(url, pool_max=8)
    try:
        await db.connect()
        yield db
    finally:
        await db.close()
        await release()


@pytest.fixture
async def migrated_mariadb_url(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """The URL of a migrated MariaDB database holding no rows, the test's own until it ends:
    for tests of real server processes that are not about ``orbit migrate``."""
    pool: MigratedMySQLDatabases = request.getfixturevalue("migrated_mysql")
    name = await pool.borrow()
    try:
        yield pool.server.url_for(name)
    finally:
        await pool.give_back(name)


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


@functools.cache
def shared_litestar(settings: Settings) -> Litestar:
    """The test process's one Litestar app for ``settings``: it holds nothing of a node or a
    test (each request finds its node in its scope), and building one takes about 0.1 s,
    more than most HTTP tests."""
    return build_litestar(settings)


def orbit_app(node: Node) -> OrbitApp:
    """``OrbitApp(node)`` on the shared Litestar app of the node's settings."""
    return OrbitApp(node, litestar=shared_litestar(node.settings))


@pytest.fixture
async def http(node: Node) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.ASGITransport(app=orbit_app(node))
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


async def make_key_at(url: str, scope: Scope = SCOPE, *roles: Role) -> str:
    """An API key made in this process on the database at ``url``, as ``orbit keys create``
    makes one (the command has tests of its own), without starting a process for it."""
    db = open_database(url, pool_max=2)
    try:
        node = await build_node(Settings.load(environ={}), db=db)
        return await make_key(node, scope, *roles)
    finally:
        await db.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
