"""Where a benchmark run's databases live: a private MariaDB that the runner starts (no
``--url``), or an existing server, with an empty database per run beside the given one."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench.baseline import _connect_args


async def fresh_database(url: str, suffix: str) -> str:
    """An empty database beside the one ``url`` names (``<name>_<suffix>``), for one run."""
    import asyncmy  # type: ignore[import-untyped]

    parts = urlsplit(url)
    name = f"{parts.path.lstrip('/') or 'orbit'}_{suffix}"
    args = {**_connect_args(url), "db": None, "autocommit": True}
    conn = await asyncmy.connect(**args)
    try:
        async with conn.cursor() as cur:
            await cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            await cur.execute(f"CREATE DATABASE `{name}`")
    finally:
        conn.close()
    return urlunsplit(parts._replace(path=f"/{name}"))


class Databases:
    """``with Databases(url) as dbs: dbs.fresh("name")`` — a private MariaDB when ``url`` is
    None (started on entry, removed on exit), else databases on the given server."""

    def __init__(self, url: str | None) -> None:
        self.url = url
        self._harness: Any = None

    def __enter__(self) -> Databases:
        if self.url is None:
            from tests.harness.mariadb import MariaDBServer

            self._harness = MariaDBServer().__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._harness is not None:
            self._harness.__exit__(kind, error, trace)

    def fresh(self, name: str) -> str:
        """The URL of an empty database for one run (call it outside an event loop when a
        server was given)."""
        if self._harness is None:
            assert self.url is not None
            return asyncio.run(fresh_database(self.url, name))
        self._harness.drop_database(name)
        return str(self._harness.create_database(name))

    def drop(self, name: str) -> None:
        """Remove a run's database from the private server (a given server keeps it)."""
        if self._harness is not None:
            self._harness.drop_database(name)
