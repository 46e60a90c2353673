"""Test databases: a private MariaDB server (or ORBIT_TEST_MYSQL_URL) and SQLite files."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncmy

from tests.harness.mariadb import MariaDBServer

_counter = itertools.count(1)


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

    async def _admin(self, statement: str) -> None:
        conn = await asyncmy.connect(
            host=self.host, port=self.port, user=self.user, password=self.password
        )
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


@contextmanager
def mysql_server_for_tests() -> Iterator[MySQLServerForTests]:
    external = os.environ.get("ORBIT_TEST_MYSQL_URL")
    if external:
        yield MySQLServerForTests(external)
        return
    with MariaDBServer() as server:
        yield MySQLServerForTests(server.url(), server)
