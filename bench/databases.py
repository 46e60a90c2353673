"""Where a benchmark run's databases live: a private MariaDB that the runner starts (no
``--url``), or an existing server, with an empty database per run beside the given one.

The private server is configured as a production server would be, not as the test suite's
(which keeps its data on tmpfs with a small buffer pool, for speed): its data directory is on
a disk (under the first of ``/var/tmp`` and the system's temporary folder that is not a memory
filesystem), every commit flushes the redo log (``innodb_flush_log_at_trx_commit=1``), pages
are written twice (``innodb_doublewrite=ON``), and the buffer pool and redo log are sized for
a run: 1 GiB and 512 MiB. No binary log, as on a server without replicas."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench.baseline import _connect_args
from bench.storage import MEMORY_FILESYSTEMS, database_facts, filesystem_type, on_memory

# mariadbd options of the private server, after the test harness's own (which they override).
SERVER_OPTIONS = (
    "--innodb-buffer-pool-size=1G",
    "--innodb-log-file-size=512M",
    "--innodb-flush-log-at-trx-commit=1",
    "--innodb-doublewrite=ON",
    "--innodb-flush-method=O_DIRECT",
    "--skip-log-bin",
)


class DataInMemoryError(Exception):
    """The server keeps its data on a memory filesystem and ``allow_tmpfs`` was not given."""


def data_parent() -> Path:
    """Where the private server's data directory is made: ``orbit-bench`` in the first of
    ``/var/tmp`` and the system's temporary folder that is on a disk (the first, if neither
    is; the runner then refuses to measure without ``--allow-tmpfs``)."""
    candidates = [Path("/var/tmp"), Path(tempfile.gettempdir())]  # noqa: S108 - a private folder inside
    usable = [c for c in candidates if c.is_dir()]
    on_disk = [c for c in usable if filesystem_type(c) not in MEMORY_FILESYSTEMS]
    return (on_disk or usable or candidates)[0] / "orbit-bench"


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
    its server (removed on exit).

    On entry the server's facts are read (``facts``: version, durability settings, where the
    data lives); a server whose data is on a memory filesystem raises ``DataInMemoryError``
    unless ``allow_tmpfs``. Enter it outside an event loop."""

    def __init__(self, url: str | None, *, allow_tmpfs: bool = False) -> None:
        self.url = url
        self.allow_tmpfs = allow_tmpfs
        self.facts: dict[str, Any] = {}
        self._harness: Any = None
        self._made: list[str] = []  # databases made beside a given one, removed on exit

    def __enter__(self) -> Databases:
        if self.url is None:
            from tests.harness.mariadb import MariaDBServer

            self._harness = MariaDBServer(data_parent(), SERVER_OPTIONS).__enter__()
        try:
            self.facts = self._read_facts()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self.facts["tmpfs_allowed"] = self.allow_tmpfs
        if on_memory(self.facts) and not self.allow_tmpfs:
            storage = self.facts["storage"]
            self.__exit__(None, None, None)
            raise DataInMemoryError(
                f"the database keeps its data in {storage['datadir']} on "
                f"{storage['filesystem']}: commits there never wait for a disk, so its figures "
                "and ratios would flatter every system measured. Use a server whose data is on "
                "a disk (--url, or none for a private one on disk), or pass --allow-tmpfs to "
                "measure anyway (the report then says so)."
            )
        return self

    def _read_facts(self) -> dict[str, Any]:
        if self._harness is not None:
            return database_facts(self._harness.url(), private=True)
        assert self.url is not None
        return database_facts(self.url, private=False)

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

    @property
    def private(self) -> bool:
        """Whether the runner started the server (and so may stop it: ``outage``)."""
        return self._harness is not None

    def outage(self, seconds: float) -> None:
        """Stop the private server for ``seconds`` (SIGTERM: connections break at once; the
        data is kept), then start it again on the same port and wait until it answers."""
        if self._harness is None:
            raise RuntimeError("outages need the runner's own server (no --url)")
        self._harness.stop()
        time.sleep(seconds)  # the outage's length, not a synchronisation
        self._harness.start()

    def fresh(self, name: str) -> str:
        """The URL of an empty database for one run (call it outside an event loop when a
        server was given)."""
        if self._harness is None:
            assert self.url is not None
            self._made.append(name)
            return asyncio.run(fresh_database(self.url, name))
        self._harness.drop_database(name)
        return str(self._harness.create_database(name))

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
