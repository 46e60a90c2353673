"""A throwaway PostgreSQL server for tests, started from Debian's ``postgresql`` binaries.

The server gets its own data directory (on tmpfs under /dev/shm when there is one), its own
UNIX socket directory and a free TCP port on 127.0.0.1, with ``trust`` authentication for the
``postgres`` user and durability off (``fsync=off``): it is for tests only. As root, the
binaries run as the ``postgres`` system user (``initdb`` refuses root). Missing binaries are
installed with apt-get when running as root, as the MariaDB harness does::

    with PostgreSQLServer() as server:
        url = server.url()  # postgresql://postgres@127.0.0.1:PORT/postgres

``ORBIT_TEST_POSTGRES_URL`` lets a test run use an existing server instead
(:func:`postgres_url_for_tests`).
"""

from __future__ import annotations

import atexit
import fcntl
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from tests.harness.mariadb import APT_LOCK, free_port

__all__ = ["PostgreSQLServer", "find_postgres_bin", "postgres_url_for_tests"]

URL_ENV = "ORBIT_TEST_POSTGRES_URL"
_TIMEOUT = 120.0
_OWNER_FILE = "owner.pid"


def find_postgres_bin() -> Path | None:
    """The newest ``/usr/lib/postgresql/N/bin`` holding ``initdb`` and ``pg_ctl``."""
    root = Path("/usr/lib/postgresql")
    if not root.is_dir():
        return None
    found = [
        path / "bin"
        for path in root.iterdir()
        if (path / "bin" / "initdb").exists() and (path / "bin" / "pg_ctl").exists()
    ]
    return max(found, key=lambda p: int(p.parent.name), default=None) if found else None


def _ensure_bin() -> Path:
    found = find_postgres_bin()
    if found is not None:
        return found
    apt_get = shutil.which("apt-get")
    if os.geteuid() != 0 or apt_get is None:
        raise RuntimeError(
            "PostgreSQL's binaries (initdb, pg_ctl) were not found under /usr/lib/postgresql; "
            "install them with: apt-get install postgresql (or set ORBIT_TEST_POSTGRES_URL)"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with APT_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if find_postgres_bin() is None:
            for command in (
                [apt_get, "update"],
                [apt_get, "install", "-y", "--no-install-recommends", "postgresql"],
            ):
                subprocess.run(command, env=env, capture_output=True, check=True, timeout=1800)
    found = find_postgres_bin()
    if found is None:
        raise RuntimeError("apt-get installed postgresql, but initdb is still not found")
    return found


class PostgreSQLServer:
    """A private PostgreSQL: own data directory, own socket directory, own port."""

    def __init__(self) -> None:
        self._root: Path | None = None
        self._port: int | None = None
        self._bin: Path | None = None
        self._owner_pid = os.getpid()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the PostgreSQL server has not been started yet")
        return self._port

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> None:
        kwargs: dict[str, Any] = {}
        if os.geteuid() == 0:
            kwargs["user"] = "postgres"
        result = subprocess.run(
            list(args),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT,
            check=False,
            cwd="/",
            **kwargs,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{args[0]} exited with {result.returncode}:\n{result.stderr}")

    def start(self) -> None:
        self._bin = _ensure_bin()
        shm = Path("/dev/shm")  # noqa: S108 - a private directory is made inside
        parent = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
        self._remove_abandoned(Path(parent or tempfile.gettempdir()))
        self._root = Path(tempfile.mkdtemp(prefix="orbit-postgres-", dir=parent))
        (self._root / _OWNER_FILE).write_text(str(os.getpid()))
        self._root.chmod(0o755)
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(self._root, entry.pw_uid, entry.pw_gid)
        atexit.register(self._at_exit)
        data = self._root / "data"
        self._run(
            str(self._bin / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-sync",
        )
        self._port = free_port()
        options = (
            f"-p {self._port} -k {self._root} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            str(self._bin / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(self._root / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def _remove_abandoned(self, parent: Path) -> None:
        """Stop the servers and delete the directories of test runs that were killed: pg_ctl
        detaches the server, so it outlives a killed run unless a later one stops it."""
        assert self._bin is not None
        for candidate in parent.glob("orbit-postgres-*"):
            try:
                owner = int((candidate / _OWNER_FILE).read_text().strip() or 0)
                os.kill(owner, 0)
                continue  # its run is alive
            except ProcessLookupError:
                pass
            except (OSError, ValueError):
                continue
            if (candidate / "data" / "postmaster.pid").exists():
                with suppress(RuntimeError, subprocess.TimeoutExpired):
                    self._run(
                        str(self._bin / "pg_ctl"), "-D", str(candidate / "data"), "-m",
                        "immediate", "stop",
                    )  # fmt: skip
            shutil.rmtree(candidate, ignore_errors=True)

    def cleanup(self) -> None:
        if self._root is not None and self._bin is not None:
            data = self._root / "data"
            if (data / "postmaster.pid").exists():
                with suppress(RuntimeError):
                    self._run(str(self._bin / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
            shutil.rmtree(self._root, ignore_errors=True)
        self._root = None

    def _at_exit(self) -> None:
        if os.getpid() == self._owner_pid:
            self.cleanup()

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()


@contextmanager
def postgres_url_for_tests() -> Iterator[str]:
    """``ORBIT_TEST_POSTGRES_URL`` when set, else the URL of a server started for the run."""
    url = os.environ.get(URL_ENV, "").strip()
    if url:
        yield url
        return
    with PostgreSQLServer() as server:
        yield server.url()
