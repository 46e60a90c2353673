"""Where a benchmark run's databases live: a private MariaDB that the runner starts (no
``--url``), or an existing server, with an empty database per run beside the given one."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench.baseline import _connect_args


async def _on_server(url: str, *statements: str) -> None:
    import asyncmy

    conn = await asyncmy.connect(**{**_connect_args(url), "db": None, "autocommit": True})
    try:
        async with conn.cursor() as cur:
            for statement in statements:
                await cur.execute(statement)
    finally:
        conn.close()


def _sibling(url: str, suffix: str) -> tuple[str, str]:
    parts = urlsplit(url)
    name = f"{parts.path.lstrip('/') or 'orbit'}_{suffix}"
    return name, urlunsplit(parts._replace(path=f"/{name}"))


async def fresh_database(url: str, suffix: str) -> str:
    """An empty database beside the one ``url`` names (``<name>_<suffix>``), for one run."""
    name, sibling = _sibling(url, suffix)
    await _on_server(url, f"DROP DATABASE IF EXISTS `{name}`", f"CREATE DATABASE `{name}`")
    return sibling


class Databases:
    """``with Databases(url) as dbs: dbs.fresh("name")`` — a private MariaDB when ``url`` is
    None (started on entry, removed on exit), else scratch databases beside the given one on
    its server (removed on exit)."""

    def __init__(self, url: str | None) -> None:
        self.url = url
        self._harness: Any = None
        self._made: list[str] = []  # databases made beside a given one, removed on exit

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
        elif self._made and self.url is not None:
            drops = [f"DROP DATABASE IF EXISTS `{_sibling(self.url, n)[0]}`" for n in self._made]
            asyncio.run(_on_server(self.url, *drops))

    def fresh(self, name: str) -> str:
        """The URL of an empty database for one run (call it outside an event loop when a
        server was given)."""
        if self._harness is None:
            assert self.url is not None
            self._made.append(name)
            return asyncio.run(fresh_database(self.url, name))
        self._harness.drop_database(name)
        return str(self._harness.create_database(name))

    async def fresh_async(self, name: str) -> str:
        """``fresh`` for a caller inside an event loop."""
        if self._harness is None:
            assert self.url is not None
            self._made.append(name)
            return await fresh_database(self.url, name)
        return self.fresh(name)

    async def drop_async(self, name: str) -> None:
        """``drop`` for a caller inside an event loop, for either kind of server."""
        if self._harness is None and self.url is not None and name in self._made:
            self._made.remove(name)
            await _on_server(self.url, f"DROP DATABASE IF EXISTS `{_sibling(self.url, name)[0]}`")
        elif self._harness is not None:
            self._harness.drop_database(name)

    def drop(self, name: str) -> None:
        """Remove a run's database at once, on either kind of server (call it outside an
        event loop): a run must not find the pages of earlier runs in the buffer pool."""
        if self._harness is None:
            asyncio.run(self.drop_async(name))
        else:
            self._harness.drop_database(name)
