"""A throwaway MariaDB server for tests, started from the distribution's binaries.

The server gets its own data directory (on tmpfs under /dev/shm when there is room, so it is
fast), its own UNIX socket and a free TCP port on 127.0.0.1; it never reads any option file
(``--no-defaults``), so it is independent of a system-wide MariaDB on the same machine.

``root`` with an empty password can log in over TCP::

    with MariaDBServer() as server:
        url = server.url()  # mysql://root@127.0.0.1:PORT/orbit_test

``stop()`` keeps the data directory and the port, so ``start()`` restarts the same server
(useful to test what survives a restart); ``cleanup()`` stops it and deletes everything.
The server process runs in its own process group, is stopped (and its files removed) at
interpreter exit, and on Linux it receives SIGTERM if the process that started it dies.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import NamedTuple, Self
from urllib.parse import quote

__all__ = [
    "APT_LOCK",
    "DEFAULT_DATABASE",
    "MariaDBServer",
    "ensure_mariadb_binaries",
    "free_port",
    "parent_death_signal",
]

DEFAULT_DATABASE = "orbit_test"

_STARTUP_TIMEOUT = 60.0
_STOP_TIMEOUT = 30.0
_INSTALL_DB_TIMEOUT = 180.0
_APT_TIMEOUT = 1800.0
_SQL_TIMEOUT = 30.0
_POLL_INTERVAL = 0.05
_LOG_TAIL_LINES = 40
# sun_path holds 108 bytes on Linux; stay well below it.
_MAX_SOCKET_PATH = 100
# The data directory of an idle server takes about 130 MB (mostly the 96 MB redo log).
_MIN_SHM_FREE = 512 * 1024 * 1024
_SEARCH_DIRS = ("/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin")
_APT_PACKAGES = ("mariadb-server", "mariadb-client")
_PR_SET_PDEATHSIG = 1
#: The file locked while a harness runs apt-get: one apt-get at a time in a test run (the
#: browser harness installs its packages too).
APT_LOCK = Path(tempfile.gettempdir()) / "orbit-apt-get.lock"

_SERVER_OPTIONS = (
    "--bind-address=127.0.0.1",
    "--skip-name-resolve",
    "--innodb-buffer-pool-size=64M",
    "--max-connections=500",
    "--innodb-lock-wait-timeout=5",
    # What Debian's packaged configuration sets; the compiled-in default is latin1.
    "--character-set-server=utf8mb4",
    "--collation-server=utf8mb4_general_ci",
)


class _Binaries(NamedTuple):
    mariadbd: Path
    install_db: Path
    client: Path


# --------------------------------------------------------------------------------------------
# Binaries
# --------------------------------------------------------------------------------------------


def _find_binary(name: str) -> Path | None:
    search = os.pathsep.join([os.environ.get("PATH", ""), *_SEARCH_DIRS])
    found = shutil.which(name, path=search)
    return Path(found) if found else None


def _locate_binaries() -> _Binaries | None:
    mariadbd = _find_binary("mariadbd")
    install_db = _find_binary("mariadb-install-db")
    client = _find_binary("mariadb")
    if mariadbd is None or install_db is None or client is None:
        return None
    return _Binaries(mariadbd, install_db, client)


def _tail(text: str, lines: int = _LOG_TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _install_packages() -> None:
    apt_get = _find_binary("apt-get")
    if os.geteuid() != 0 or apt_get is None:
        raise RuntimeError(
            "the MariaDB server binaries (mariadbd, mariadb-install-db, mariadb) were not found, "
            "and they can only be installed automatically when running as root on a system with "
            "apt-get; install them with: apt-get install mariadb-server mariadb-client"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    commands = (
        [str(apt_get), "update"],
        [str(apt_get), "install", "-y", "--no-install-recommends", *_APT_PACKAGES],
    )
    # Several test processes may get here at once; apt-get must not run concurrently.
    with APT_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _locate_binaries() is not None:
            return
        for command in commands:
            result = subprocess.run(
                command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=_APT_TIMEOUT,
                check=False,
            )
            if result.returncode != 0:
                raise RuntimeError(
                    f"installing MariaDB failed: `{' '.join(command)}` exited with "
                    f"{result.returncode}:\n{_tail(result.stdout)}"
                )


def _ensure_binaries() -> _Binaries:
    found = _locate_binaries()
    if found is None:
        _install_packages()
        found = _locate_binaries()
    if found is None:
        raise RuntimeError(
            f"apt-get installed {' '.join(_APT_PACKAGES)}, but mariadbd, mariadb-install-db "
            "or mariadb is still not found"
        )
    return found


def ensure_mariadb_binaries() -> tuple[Path, Path]:
    """Return the paths of ``mariadbd`` and ``mariadb-install-db``, installing them if needed.

    The packages (mariadb-server, mariadb-client) are installed with apt-get only when running
    as root; otherwise a missing binary raises RuntimeError.
    """
    binaries = _ensure_binaries()
    return binaries.mariadbd, binaries.install_db


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------------------------
# Process helpers
# --------------------------------------------------------------------------------------------


def parent_death_signal() -> Callable[[], None] | None:
    """A preexec function that makes the child get SIGTERM when its parent dies.

    This covers what atexit cannot (the test process being killed). The kernel sends the
    signal when the *thread* that forked exits, so it is used only from the main thread.
    """
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    signum = int(signal.SIGTERM)

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signum)

    return preexec


def _default_parent_dir() -> Path | None:
    shm = Path("/dev/shm")  # noqa: S108 - a private directory is created inside
    if not shm.is_dir() or not os.access(shm, os.W_OK | os.X_OK):
        return None
    try:
        if shutil.disk_usage(shm).free < _MIN_SHM_FREE:
            return None
    except OSError:
        return None
    return shm


_OWNER_FILE = "owner.pid"
_ABANDONED_AFTER_S = 3600


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_abandoned_dirs(parent: Path) -> None:
    """Delete data directories left by test runs that were killed (their owner is gone and
    so is their server), so tmpfs does not fill up across runs."""
    for candidate in parent.glob("orbit-mariadb-*"):
        if not candidate.is_dir():
            continue
        owner = candidate / _OWNER_FILE
        server_pid = candidate / "data" / "mysqld.pid"
        try:
            if owner.exists():
                abandoned = not _alive(int(owner.read_text().strip() or 0))
            else:  # a directory from before owner files: judge by age
                abandoned = time.time() - candidate.stat().st_mtime > _ABANDONED_AFTER_S
            if abandoned and server_pid.exists():
                abandoned = not _alive(int(server_pid.read_text().strip() or 0))
        except (OSError, ValueError):
            continue
        if abandoned:
            shutil.rmtree(candidate, ignore_errors=True)


def _quote_identifier(name: str) -> str:
    if not name or "\x00" in name:
        raise ValueError(f"invalid database name: {name!r}")
    return "`" + name.replace("`", "``") + "`"


class _PortInUseError(RuntimeError):
    pass


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


class MariaDBServer:
    """A private mariadbd: own data directory, own socket, own port on 127.0.0.1."""

    def __init__(self, base_dir: Path | None = None, options: Sequence[str] = ()) -> None:
        """``base_dir``: where the data directory is made (default: /dev/shm when there is
        room, else the system's temporary folder). ``options``: more ``mariadbd`` options,
        after the harness's own, so they override them (the benchmarks' server settings)."""
        self._base_dir = base_dir
        self._options = tuple(options)
        self._root: Path | None = None
        self._socket_dir: Path | None = None
        self._port: int | None = None
        self._binaries: _Binaries | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_offset = 0
        self._owner_pid = os.getpid()
        self._atexit_registered = False
        #: Seconds taken by mariadb-install-db (set by the first start()).
        self.init_seconds: float | None = None
        #: Seconds the last start() waited for the server to accept connections.
        self.start_seconds: float | None = None

    # -- paths and addresses ------------------------------------------------------------------

    def _require_root(self) -> Path:
        if self._root is None:
            raise RuntimeError("the MariaDB server has not been started yet")
        return self._root

    @property
    def data_dir(self) -> Path:
        return self._require_root() / "data"

    @property
    def tmp_dir(self) -> Path:
        return self._require_root() / "tmp"

    @property
    def socket_path(self) -> Path:
        if self._socket_dir is not None:
            return self._socket_dir / "mysqld.sock"
        return self.data_dir / "mysqld.sock"

    @property
    def error_log(self) -> Path:
        return self.data_dir / "error.log"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "mysqld.pid"

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the MariaDB server has not been started yet")
        return self._port

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def url(self, database: str = DEFAULT_DATABASE) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/{quote(database, safe='')}"

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the server; the first call also creates the data directory.

        After stop(), start() restarts on the same data directory and the same port.
        """
        if self.running:
            return
        first = self._root is None
        if first:
            self._create_data_dir()
        try:
            self._start_process(pick_port=first)
            if first:
                self._run_sql(
                    "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';"
                    "ALTER USER 'root'@'127.0.0.1' IDENTIFIED BY '';"
                    "GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;"
                    f"CREATE DATABASE IF NOT EXISTS {_quote_identifier(DEFAULT_DATABASE)};"
                )
            self._check_tcp_login()
        except BaseException:
            # A half-initialised data directory is of no use: start over next time.
            if first:
                self.cleanup()
            else:
                self._terminate()
            raise

    def stop(self) -> None:
        """Shut the server down (SIGTERM, SIGKILL after a timeout); the data is kept."""
        self._terminate()

    def cleanup(self) -> None:
        """Stop the server if it runs and delete its data directory."""
        self._terminate()
        for path in (self._root, self._socket_dir):
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)
        self._root = None
        self._socket_dir = None
        self._port = None
        if self._atexit_registered:
            atexit.unregister(self._at_exit)
            self._atexit_registered = False

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

    # -- databases ----------------------------------------------------------------------------

    def create_database(self, name: str) -> str:
        self._run_sql(f"CREATE DATABASE IF NOT EXISTS {_quote_identifier(name)};")
        return self.url(name)

    def drop_database(self, name: str) -> None:
        self._run_sql(f"DROP DATABASE IF EXISTS {_quote_identifier(name)};")

    # -- internals ----------------------------------------------------------------------------

    def _at_exit(self) -> None:
        if os.getpid() == self._owner_pid:
            self.cleanup()

    def _create_data_dir(self) -> None:
        binaries = _ensure_binaries()
        parent = self._base_dir if self._base_dir is not None else _default_parent_dir()
        if parent is not None:
            parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned_dirs(Path(parent) if parent is not None else Path(tempfile.gettempdir()))
        self._root = Path(tempfile.mkdtemp(prefix="orbit-mariadb-", dir=parent))
        (self._root / _OWNER_FILE).write_text(str(os.getpid()))
        if not self._atexit_registered:
            atexit.register(self._at_exit)
            self._atexit_registered = True
        if len(str(self.data_dir / "mysqld.sock")) >= _MAX_SOCKET_PATH:
            self._socket_dir = Path(tempfile.mkdtemp(prefix="mdb-", dir="/tmp"))
        self.tmp_dir.mkdir()
        command = [
            str(binaries.install_db),
            "--no-defaults",
            f"--datadir={self.data_dir}",
            # Its own temporary files: servers bootstrapped at once in one /tmp (one per test
            # process) otherwise collide on the names of their temporary tables.
            f"--tmpdir={self.tmp_dir}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            # Skips the check that the host name resolves, which fails in some containers.
            "--force",
        ]
        # No --user here even as root: with --user, mariadb-install-db also changes the owner
        # of the system-wide PAM plugin helper. Running as root, the files belong to root.
        started = time.monotonic()
        try:
            result = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=_INSTALL_DB_TIMEOUT,
                check=False,
            )
        except BaseException:
            self.cleanup()
            raise
        self.init_seconds = time.monotonic() - started
        if result.returncode != 0:
            self.cleanup()
            raise RuntimeError(
                f"mariadb-install-db exited with {result.returncode}:\n{_tail(result.stdout)}"
            )
        self._binaries = binaries

    def _server_command(self) -> list[str]:
        assert self._binaries is not None
        command = [
            str(self._binaries.mariadbd),
            "--no-defaults",
            f"--datadir={self.data_dir}",
            f"--tmpdir={self.tmp_dir}",
            f"--socket={self.socket_path}",
            f"--port={self.port}",
            f"--pid-file={self.pid_file}",
            f"--log-error={self.error_log}",
            *_SERVER_OPTIONS,
            *self._options,
        ]
        if os.geteuid() == 0:
            command.append("--user=root")
        return command

    def _start_process(self, *, pick_port: bool) -> None:
        # A port picked by free_port() can be taken by someone else before mariadbd binds it.
        attempts = 3 if pick_port else 1
        for attempt in range(1, attempts + 1):
            if pick_port:
                self._port = free_port()
            self._spawn()
            try:
                self._wait_until_ready()
            except _PortInUseError:
                self._terminate()
                if attempt == attempts:
                    raise
            else:
                return

    def _spawn(self) -> None:
        self._log_offset = self.error_log.stat().st_size if self.error_log.exists() else 0
        self._process = subprocess.Popen(
            self._server_command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=parent_death_signal(),  # noqa: PLW1509 - only calls prctl()
        )

    def _log_tail(self) -> str:
        try:
            with self.error_log.open("rb") as log:
                log.seek(self._log_offset)
                text = log.read().decode("utf-8", errors="replace")
        except OSError as exc:
            return f"(cannot read {self.error_log}: {exc})"
        return _tail(text) or "(the error log is empty)"

    def _wait_until_ready(self) -> None:
        process = self._process
        assert process is not None
        started = time.monotonic()
        deadline = started + _STARTUP_TIMEOUT
        while True:
            returncode = process.poll()
            if returncode is not None:
                tail = self._log_tail()
                message = (
                    f"mariadbd exited with {returncode} during startup "
                    f"(port {self.port}, data directory {self.data_dir}); "
                    f"end of its error log:\n{tail}"
                )
                if "Address already in use" in tail:
                    raise _PortInUseError(message)
                raise RuntimeError(message)
            if self.socket_path.exists() and self._ping():
                self.start_seconds = time.monotonic() - started
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"mariadbd did not accept connections within {_STARTUP_TIMEOUT:.0f} s "
                    f"(port {self.port}, data directory {self.data_dir}); "
                    f"end of its error log:\n{self._log_tail()}"
                )
            time.sleep(_POLL_INTERVAL)

    def _client_command(self, *, tcp: bool = False) -> list[str]:
        assert self._binaries is not None
        command = [str(self._binaries.client), "--no-defaults", "--user=root"]
        if tcp:
            command += ["--protocol=TCP", "--host=127.0.0.1", f"--port={self.port}"]
        else:
            command += ["--protocol=SOCKET", f"--socket={self.socket_path}"]
        return [*command, "--connect-timeout=5", "--batch", "--skip-column-names"]

    def _ping(self) -> bool:
        try:
            result = subprocess.run(
                [*self._client_command(), "--execute=SELECT 1"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=10,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return False
        return result.returncode == 0

    def _run_sql(self, sql: str, *, tcp: bool = False) -> str:
        if not self.running:
            raise RuntimeError("the MariaDB server is not running")
        command = [*self._client_command(tcp=tcp), f"--execute={sql}"]
        result = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_SQL_TIMEOUT,
            check=False,
        )
        if result.returncode != 0:
            where = f"127.0.0.1:{self.port}" if tcp else str(self.socket_path)
            raise RuntimeError(
                f"SQL failed on the test MariaDB ({where}): {sql}\n{result.stderr.strip()}"
            )
        return result.stdout

    def _check_tcp_login(self) -> None:
        if self._run_sql("SELECT CURRENT_USER();", tcp=True).strip() == "":
            raise RuntimeError("root could not log in over TCP to the test MariaDB")

    def _terminate(self) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._process = None
