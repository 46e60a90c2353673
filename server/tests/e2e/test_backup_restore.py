"""The restore drill of docs/operations/backups.md, for real: a logical backup of a database an
``orbit server`` is using (``mariadb-dump --single-transaction``, taken while it runs), restored
into a new database, and a new server on it: ready, with every task, key and idempotency key
as they were at the backup, and able to run what was still pending."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from orbit_server.governance.keys import Role
from tests.conftest import SCOPE, make_key_at
from tests.e2e.test_workers import eventually
from tests.support.databases import MySQLServerForTests
from tests.support.processes import OrbitProcess

APP = """
from orbit_sdk.worker import TaskContext, Worker

worker = Worker()


@worker.handler(queue="{queue}", type="noop")
def noop(ctx: TaskContext) -> dict:
    return {{"ran": ctx.task_id}}
"""


def _client_args(url: str) -> list[str]:
    parts = urlsplit(url)
    args = ["-h", parts.hostname or "127.0.0.1", "-P", str(parts.port or 3306),
            "-u", parts.username or "root", "--protocol=TCP"]  # fmt: skip
    if parts.password:
        args.append(f"-p{parts.password}")
    return args


def _tool(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(f"none of {names} is installed (Debian: the mariadb-client package)")


class Site:
    def __init__(self, key: str, tmp: Path) -> None:
        self.key, self.tmp = key, tmp
        self.procs: list[OrbitProcess] = []

    def server(self, database_url: str) -> str:
        proc = OrbitProcess(["server", "--port", "0", "--host", "127.0.0.1"],
                            env={"ORBIT_DATABASE_URL": database_url})  # fmt: skip
        self.procs.append(proc)
        return proc.wait_for("ORBIT_URL")["ORBIT_URL"]

    def worker(self, url: str, queue: str) -> None:
        """An ``orbit-worker`` with one handler, for ``queue``."""
        (self.tmp / f"drill_{queue}.py").write_text(APP.format(queue=queue))
        command = [str(Path(sys.executable).parent / "orbit-worker"), f"drill_{queue}:worker",
                   "--url", url, "--concurrency", "4"]  # fmt: skip
        env = {"ORBIT_API_KEY": self.key, "PYTHONPATH": str(self.tmp)}
        self.procs.append(OrbitProcess.command(command, env=env))

    def call(self, method: str, url: str, body: Any = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.key}"}
        return httpx.request(method, url, json=body, headers=headers, timeout=30)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.proc.poll() is None:
                proc.proc.kill()
            proc.stop(timeout=10)
        self.procs.clear()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    found = Site("", tmp_path)
    try:
        yield found
    finally:
        found.stop()


async def test_a_backup_taken_while_serving_restores_into_a_working_orbit(
    site: Site, migrated_mariadb_url: str, mysql_server: MySQLServerForTests, tmp_path: Path
) -> None:
    site.key = await make_key_at(migrated_mariadb_url, SCOPE, Role.WORKER, Role.SUBMITTER)
    url = site.server(migrated_mariadb_url)
    done = [site.call("POST", f"{url}/v1/tasks", {"queue": "now", "type": "noop",
                                                  "idempotency_key": f"now-{i}"}).json()["id"]
            for i in range(4)]  # fmt: skip
    waiting = [site.call("POST", f"{url}/v1/tasks", {"queue": "later", "type": "noop",
                                                     "idempotency_key": f"later-{i}"}).json()["id"]
               for i in range(3)]  # fmt: skip
    site.worker(url, "now")

    def state(base: str, task_id: str) -> str:
        return str(site.call("GET", f"{base}/v1/tasks/{task_id}").json()["state"])

    eventually(lambda: all(state(url, t) == "succeeded" for t in done), "the first tasks to run")

    # The backup, taken while the server runs: one consistent snapshot of every table.
    dump = tmp_path / "orbit.sql"
    source = urlsplit(migrated_mariadb_url).path.lstrip("/")
    with dump.open("wb") as out:
        subprocess.run([_tool("mariadb-dump", "mysqldump"), *_client_args(migrated_mariadb_url),
                        "--single-transaction", "--skip-lock-tables", source],
                       stdout=out, check=True, timeout=120)  # fmt: skip
    site.stop()

    restored = await mysql_server.create()
    try:
        restored_url = mysql_server.url_for(restored)
        with dump.open("rb") as given:
            subprocess.run([_tool("mariadb", "mysql"), *_client_args(restored_url), restored],
                           stdin=given, check=True, timeout=120)  # fmt: skip
        # The restored schema is this release's: nothing for orbit migrate to do.
        check = subprocess.run([str(Path(sys.executable).parent / "orbit"), "migrate"],
                               env={**os.environ, "ORBIT_DATABASE_URL": restored_url},
                               capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert check.returncode == 0, check.stdout + check.stderr
        assert "schema is current" in check.stdout

        url = site.server(restored_url)
        ready = httpx.get(f"{url}/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
        # The key, the finished tasks with their results, the pending ones: as at the backup.
        for task_id in done:
            task = site.call("GET", f"{url}/v1/tasks/{task_id}").json()
            assert task["state"] == "succeeded" and task["result"] == {"ran": task_id}
        assert [state(url, t) for t in waiting] == ["pending"] * 3
        # An idempotency key sent again finds its task: a submitter retrying after the restore
        # does not make a second one.
        again = site.call("POST", f"{url}/v1/tasks", {"queue": "later", "type": "noop",
                                                      "idempotency_key": "later-0"})  # fmt: skip
        assert again.json()["id"] == waiting[0]
        site.worker(url, "later")
        eventually(lambda: all(state(url, t) == "succeeded" for t in waiting),
                   "the pending tasks to run on the restored database")  # fmt: skip
    finally:
        site.stop()
        await mysql_server.drop(restored)
