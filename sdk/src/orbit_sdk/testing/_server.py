"""``OrbitServer``: a real ``orbit dev --testing`` in a child process, for test suites.

The server is the ``orbit`` command of the ``orbit-server`` distribution, run as a process: the
SDK never imports the server. It serves a SQLite file in a temporary directory on a free port,
with the test mode on (a clock tests move forward, throwaway environments).
"""

from __future__ import annotations

import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Final

import msgspec

from orbit_sdk._client import Client
from orbit_sdk._config import ConfigurationError

__all__ = ["SERVER_COMMAND_ENV", "OrbitServer", "ServerNotInstalled", "TestEnvironment"]

SERVER_COMMAND_ENV: Final = "ORBIT_TEST_SERVER_COMMAND"
"""A command line that runs ``orbit`` (e.g. ``python -m orbit_server``), when it is not on PATH."""
LEASE_MS: Final = 30_000
HEARTBEAT_MS: Final = 1_000
"""Workers renew every second, so that a worker learns of an attempt lost to a clock jump soon."""
START_TIMEOUT_S: Final = 60.0
STOP_TIMEOUT_S: Final = 30.0


class ServerNotInstalled(ConfigurationError):
    """The ``orbit`` command is not installed: ``pip install orbit-server``."""


class TestEnvironment(msgspec.Struct, frozen=True):
    """A fresh environment of the test server, with a key of every role."""

    __test__ = False  # not a test class, whatever pytest thinks of the name

    url: str
    tenant: str
    environment: str
    api_key: str

    def __repr__(self) -> str:  # the key stays out of test reports
        return f"TestEnvironment(url={self.url!r}, environment={self.environment!r})"


def server_command(environ: Mapping[str, str] | None = None) -> list[str]:
    """The command line that runs ``orbit``: ``$ORBIT_TEST_SERVER_COMMAND``, else ``orbit`` on
    PATH, else the ``orbit`` beside this Python (a virtualenv that is not activated)."""
    env = os.environ if environ is None else environ
    given = env.get(SERVER_COMMAND_ENV, "").strip()
    if given:
        return shlex.split(given)
    found = shutil.which("orbit") or shutil.which("orbit", path=str(Path(sys.executable).parent))
    if found is None:
        raise ServerNotInstalled(
            "orbit_sdk.testing runs a real Orbit server, and the `orbit` command was not found: "
            "install the orbit-server distribution beside orbit-sdk (pip install orbit-server), "
            f"or set {SERVER_COMMAND_ENV} to a command that runs it"
        )
    return [found]


class OrbitServer:
    """A running ``orbit dev --testing``; :meth:`start` it, :meth:`stop` it (or use ``with``).

    ``url`` and ``api_key`` are what the server printed (the key has every role in environment
    ``dev``). :meth:`new_environment` makes a fresh environment per test, which is how tests
    sharing one server stay apart. The server's log is ``log_path`` (standard error).
    """

    def __init__(
        self,
        process: subprocess.Popen[str],
        *,
        url: str,
        api_key: str,
        data_dir: Path,
        log_path: Path,
        cleanup: tempfile.TemporaryDirectory[str] | None,
    ) -> None:
        self.process = process
        self.url = url
        self.api_key = api_key
        self.data_dir = data_dir
        self.log_path = log_path
        self.lease_ms = LEASE_MS
        self._cleanup = cleanup
        self._admin = Client(url, api_key, timeout=30.0)

    def __repr__(self) -> str:
        return f"OrbitServer(url={self.url!r}, pid={self.process.pid})"

    @classmethod
    def start(
        cls,
        *,
        data_dir: Path | None = None,
        command: Sequence[str] | None = None,
        extra_args: Sequence[str] = (),
        timeout: float = START_TIMEOUT_S,
    ) -> OrbitServer:
        """Start ``orbit dev --testing`` on a free port of 127.0.0.1 and wait until it serves.

        ``data_dir`` holds the SQLite file and the log (default: a temporary directory removed
        at :meth:`stop`). ``command`` runs ``orbit`` (default: see :func:`server_command`).
        ``extra_args`` are more ``orbit dev`` flags (``["--result-retention-ms", "..."]``).
        Raises :class:`ServerNotInstalled` when there is no ``orbit`` command and
        ``RuntimeError`` when the server does not come up within ``timeout`` seconds.
        """
        argv = list(command) if command is not None else server_command()
        cleanup = None
        if data_dir is None:
            cleanup = tempfile.TemporaryDirectory(prefix="orbit-test-")
            data_dir = Path(cleanup.name)
        data_dir.mkdir(parents=True, exist_ok=True)
        log_path = data_dir / "server.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("ORBIT_")}
        args = [
            *argv,
            "dev",
            "--testing",
            "--host", "127.0.0.1",
            "--port", "0",
            "--data-dir", str(data_dir / "orbit"),
            "--lease-ms", str(LEASE_MS),
            "--heartbeat-ms", str(HEARTBEAT_MS),
            "--log-level", "warning",
            *extra_args,
        ]  # fmt: skip
        try:
            with open(log_path, "w") as log:
                process = subprocess.Popen(  # noqa: S603 - the orbit command, as configured
                    args, stdout=subprocess.PIPE, stderr=log, text=True, env=env
                )
        except OSError as exc:  # not there, not executable
            if cleanup is not None:
                cleanup.cleanup()
            raise ServerNotInstalled(
                f"cannot run {argv[0]!r} ({exc.strerror or exc}): install the orbit-server "
                f"distribution beside orbit-sdk, or set {SERVER_COMMAND_ENV} to a command that "
                "runs it"
            ) from exc
        try:
            announced = _read_announcements(process, ("ORBIT_URL", "ORBIT_API_KEY"), timeout)
        except BaseException as exc:
            _terminate(process)
            tail = log_path.read_text(errors="replace")[-2000:]
            if cleanup is not None:
                cleanup.cleanup()
            if not isinstance(exc, Exception):  # an interrupt stays one
                raise
            raise RuntimeError(
                f"orbit dev did not start ({' '.join(args)}): {exc}; its log:\n{tail}"
            ) from exc
        return cls(
            process,
            url=announced["ORBIT_URL"],
            api_key=announced["ORBIT_API_KEY"],
            data_dir=data_dir,
            log_path=log_path,
            cleanup=cleanup,
        )

    def new_environment(self) -> TestEnvironment:
        """A fresh environment (``test-…``) with a key of every role; about a millisecond."""
        made = self._admin.request("POST", "/v1/dev/environments")
        return TestEnvironment(
            url=self.url,
            tenant=made["tenant"],
            environment=made["environment"],
            api_key=made["api_key"],
        )

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``); its exit code."""
        self._admin.close()
        try:
            return _terminate(self.process, timeout)
        finally:
            if self._cleanup is not None:
                self._cleanup.cleanup()
                self._cleanup = None

    def __enter__(self) -> OrbitServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _read_announcements(
    process: subprocess.Popen[str], names: Sequence[str], timeout: float
) -> dict[str, str]:
    """The ``NAME=value`` lines ``orbit dev`` prints once it listens."""
    assert process.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_pump, args=(process.stdout, lines), daemon=True).start()
    announced: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while not all(name in announced for name in names):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"orbit dev printed no {', '.join(names)} in {timeout} s")
        try:
            line = lines.get(timeout=remaining)
        except queue.Empty:
            continue
        if line is None:
            raise RuntimeError(f"orbit dev exited with code {process.wait()}")
        name, sep, value = line.strip().partition("=")
        if sep:
            announced[name] = value
    return announced


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _terminate(process: subprocess.Popen[str], timeout: float = STOP_TIMEOUT_S) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()
    finally:
        if process.stdout is not None:
            process.stdout.close()
