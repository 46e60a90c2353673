"""The PostgreSQL harness starts a real server of its own and leaves nothing behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from .postgresql import PostgreSQLServer


def test_a_private_server_answers_and_is_removed_afterwards() -> None:
    with PostgreSQLServer() as server:
        root = server._root
        assert root is not None and (root / "data" / "postmaster.pid").exists()
        with psycopg.connect(server.url(), autocommit=True) as conn:
            [(version,)] = conn.execute("SELECT version()").fetchall()
            [(port,)] = conn.execute("SHOW port").fetchall()
        assert "PostgreSQL" in version and int(port) == server.port
    assert not root.exists()


def test_a_server_left_by_a_killed_run_is_stopped_and_removed_by_the_next() -> None:
    script = (
        "from tests.harness.postgresql import PostgreSQLServer\n"
        "server = PostgreSQLServer(); server.start(); print(server._root, flush=True)\n"
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    killed = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL
    left = Path(killed.stdout.strip())
    pid = int((left / "data" / "postmaster.pid").read_text().split()[0])
    with PostgreSQLServer():
        assert not left.exists()
    # pg_ctl returns once the server has removed its pid file, a moment before the process
    # ends; and the server was detached, so its exit may be reaped late (a zombie meanwhile).
    deadline = time.monotonic() + 30
    while _running(pid):
        assert time.monotonic() < deadline, f"the abandoned server {pid} is still running"
        time.sleep(0.05)  # polling another process's exit


def _running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
