"""A MariaDB server of a replicated topology: options that can change between starts, and
``kill()`` (SIGKILL, as a crash) besides the harness's clean ``stop()``."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from .mariadb import APT_LOCK, MariaDBServer

__all__ = ["ClusterNode", "install_packages", "query"]

SERVICE_USER = "mysql"  # made by the mariadb-server package


class ClusterNode(MariaDBServer):
    """``options`` is called at each start, so a node's command line can depend on the state
    of the topology (a Galera node bootstraps a new cluster only when no other node runs)."""

    def __init__(
        self, name: str, options: Callable[[], Sequence[str]], base_dir: Path | None = None
    ) -> None:
        super().__init__(base_dir=base_dir)
        self.name = name
        self._dynamic_options = options

    def _server_command(self) -> list[str]:
        command = [*super()._server_command(), *self._dynamic_options()]
        if os.geteuid() == 0 and "--user=root" in command:
            # rsync's daemon, which receives a Galera state transfer, switches to "nobody"
            # when it runs as root and then cannot write the data directory: as root, the
            # node runs as the packages' "mysql" user instead.
            command[command.index("--user=root")] = f"--user={SERVICE_USER}"
        return command

    def _spawn(self) -> None:
        if os.geteuid() == 0:
            _chown_tree(self._require_root(), SERVICE_USER)
        super()._spawn()

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def kill(self) -> None:
        """SIGKILL the server, as a crash: no shutdown, nothing flushed beyond what it had."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        self._process = None

    def sql(self, statement: str) -> str:
        """Run SQL as root over the socket; answers its tab-separated output."""
        return self._run_sql(statement)

    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"


def _chown_tree(root: Path, user: str) -> None:
    shutil.chown(root, user, user)
    for path in root.rglob("*"):
        shutil.chown(path, user, user)


def query(node: ClusterNode, statement: str) -> list[list[str]]:
    """Rows of ``statement`` on ``node``, each a list of column texts."""
    return [line.split("\t") for line in node.sql(statement).splitlines() if line]


def install_packages(packages: Sequence[str]) -> None:
    """apt-get install ``packages`` (as root, one apt-get at a time), or say how to."""
    apt_get = shutil.which("apt-get")
    if os.geteuid() != 0 or apt_get is None:
        raise RuntimeError(
            f"missing packages; install them with: apt-get install {' '.join(packages)}"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with APT_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for command in (
            [apt_get, "update"],
            [apt_get, "install", "-y", "--no-install-recommends", *packages],
        ):
            result = subprocess.run(
                command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                timeout=1800, check=False,
            )  # fmt: skip
            if result.returncode != 0:
                raise RuntimeError(f"`{' '.join(command)}` failed:\n{result.stdout[-2000:]}")
