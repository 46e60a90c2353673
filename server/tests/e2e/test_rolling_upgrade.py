"""A rolling upgrade from the previous release to this one on one MariaDB database, with
nothing lost (docs/operations/upgrades.md).

The previous release (``compat/releases.toml``) is built from this repository's history into
wheels and installed in a virtual environment of its own, once per test session. Then, as an
operator would: the previous ``orbit migrate``, a previous server and worker under load (keyed
submits, half of them unsafe, and two-step workflows); this
release's ``orbit migrate`` (expand) while that server runs; this release's server beside it;
workers of both SDK releases connected across releases; the old server and old workers stopped
with SIGTERM (a graceful drain) while submits go on, re-sent to the other server with their
idempotency key when an answer is lost. The database then says: one task per acknowledged
key, every task and workflow succeeded, each step ran as one task, unsafe work ran once, and
each server release ran work of each SDK release, and progress reports (0.2.0 SDKs send them
to both servers) were stored only by this release's server.
"""

from __future__ import annotations

import io
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pymysql
import pytest

from tests.compat.releases import ROOT, Release, current, previous
from tests.support.processes import OrbitProcess, clean_env

LEASE = {
    "ORBIT_LEASE_MS": "2000",
    "ORBIT_HEARTBEAT_MS": "500",
    "ORBIT_HANDSHAKE_TIMEOUT_MS": "2000",
    "ORBIT_DRAIN_GRACE_MS": "5000",
}
SETTLE_S = 60.0
APP = """
import os
import pathlib
import time

import orbit_sdk
from orbit_sdk.worker import TaskContext, Worker

worker = Worker()
LOG = pathlib.Path(os.environ["UPGRADE_LOG"])


@worker.handler(queue="upgrade", type="work")
def work(ctx: TaskContext) -> dict:
    with LOG.open("a") as log:
        log.write(f"{ctx.task_id} {ctx.attempt} {orbit_sdk.__version__}\\n")
    n = ctx.params.get("n")
    if hasattr(ctx, "progress"):  # 0.2.0 SDKs report progress, whichever server they are on
        ctx.progress({"n": n})
    # every fifth task outlasts a heartbeat (which carries the progress); the rest are short
    time.sleep(0.7 if n is not None and n % 5 == 0 else 0.02)
    return {"n": n}
"""


def fail_without_history(release: Release) -> None:
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.fail(
            f"the rolling-upgrade test builds release {release.version} from git history: "
            "run it in a git clone of Orbit (with git installed)"
        )
    found = subprocess.run(
        [git, "-C", str(ROOT), "cat-file", "-e", f"{release.commit}^{{commit}}"], check=False
    )
    if found.returncode != 0:
        pytest.fail(
            f"commit {release.commit} (release {release.version}) is not in this clone: "
            "fetch the full history (`git fetch --unshallow`, or clone without --depth)"
        )


def uv_command() -> str:
    uv = ROOT / ".tools" / "bin" / "uv"
    if uv.exists():
        return str(uv)
    found = shutil.which("uv")
    if found is None:
        pytest.fail("uv is needed to build the previous release: run scripts/bootstrap")
    return found


@pytest.fixture(scope="session")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` folder of a virtual environment holding the previous release's server and
    SDK, built from its commit, with the dependency versions of its own lock file."""
    release = previous()
    fail_without_history(release)
    uv = uv_command()
    base = tmp_path_factory.mktemp(f"release-{release.version}")
    source = base / "source"
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", release.commit,
         "server", "sdk", "pyproject.toml", "uv.lock"],
        capture_output=True, check=True,
    )  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(source, filter="data")
    env = clean_env({"UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"})
    env.pop("VIRTUAL_ENV", None)

    def run(*args: str) -> None:
        done = subprocess.run([uv, *args], capture_output=True, text=True, env=env, check=False)
        assert done.returncode == 0, f"uv {' '.join(args)}:\n{done.stderr[-3000:]}"

    run("build", "--wheel", "--all-packages", "--directory", str(source), "-o", str(base / "dist"))
    run("export", "--frozen", "--no-hashes", "--no-dev", "--no-emit-workspace",
        "--directory", str(source), "-o", str(base / "constraints.txt"))  # fmt: skip
    run("venv", "--quiet", "--python", sys.executable, str(base / "venv"))
    wheels = sorted(str(w) for w in (base / "dist").glob("*.whl"))
    run("pip", "install", "--quiet", "--python", str(base / "venv" / "bin" / "python"),
        "-c", str(base / "constraints.txt"), *wheels)  # fmt: skip
    bin_dir = base / "venv" / "bin"
    reported = subprocess.run(
        [str(bin_dir / "orbit"), "version"], capture_output=True, text=True, check=True
    )
    assert reported.stdout.strip() == release.version
    return bin_dir


@dataclass
class Submitter:
    """Submits tasks with idempotency keys from a thread, to whichever servers are up; an
    answer that does not come (a server stopping) is re-sent to the next server, same key."""

    urls: list[str]
    key: str
    acknowledged: dict[str, str] = field(default_factory=dict)  # idempotency key → task id
    resent: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    n: int = 0
    failure: BaseException | None = None

    def submit_one(self) -> None:
        self.n += 1
        n = self.n
        body = {
            "queue": "upgrade", "type": "work", "params": {"n": n},
            "idempotency_key": f"upgrade-{n}",
            "side_effect": "unsafe" if n % 2 else "idempotent",
        }  # fmt: skip
        deadline = time.monotonic() + 30
        attempt = 0
        while True:
            urls = self.urls
            url = urls[(n + attempt) % len(urls)]  # alternate between the servers that are up
            try:
                answer = httpx2.post(
                    f"{url}/v1/tasks", json=body, timeout=5,
                    headers={"Authorization": f"Bearer {self.key}"},
                )  # fmt: skip
                if answer.status_code in (200, 201):
                    self.acknowledged[str(body["idempotency_key"])] = answer.json()["id"]
                    return
                assert answer.status_code == 503, answer.text  # draining: try another
            except httpx2.TransportError:
                pass
            assert time.monotonic() < deadline, f"submit {n} was never acknowledged"
            attempt += 1
            self.resent += 1

    def start(self) -> None:
        def loop() -> None:
            try:
                while not self.stop.is_set():
                    self.submit_one()
                    self.stop.wait(0.01)
            except BaseException as exc:  # told by wait_for and join
                self.failure = exc

        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()

    def wait_for(self, count: int) -> None:
        """Until ``count`` more submits have been made."""
        target, deadline = self.n + count, time.monotonic() + 60
        while self.n < target:
            if self.failure is not None:
                raise self.failure
            assert time.monotonic() < deadline, f"{self.n} of {target} submits made"
            time.sleep(0.05)

    def join(self) -> None:
        self.stop.set()
        assert self.thread is not None
        self.thread.join(timeout=60)
        if self.failure is not None:
            raise self.failure


FLOW = {
    "name": "upgrade-flow", "version": "1",
    "steps": [
        {"id": "first", "kind": "task", "queue": "upgrade", "type": "work", "next": "second"},
        {"id": "second", "kind": "task", "queue": "upgrade", "type": "work"},
    ],
}  # fmt: skip


def start_flow(url: str, key: str, name: str) -> str:
    answer = httpx2.post(
        f"{url}/v1/workflows", json={"definition": "upgrade-flow", "input": {},
        "idempotency_key": name}, headers={"Authorization": f"Bearer {key}"}, timeout=10,
    )  # fmt: skip
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def connect(url: str) -> pymysql.connections.Connection[Any]:
    parts = urlsplit(url)
    return pymysql.connect(
        host=parts.hostname, port=parts.port or 3306, user=parts.username or "root",
        password=parts.password or "", database=parts.path.lstrip("/"), autocommit=True,
    )  # fmt: skip


def rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    with connect(url) as conn, conn.cursor() as cursor:
        cursor.execute(sql)
        return list(cursor.fetchall())


# (server node, worker id): each release's server runs work of each release's SDK
PAIRINGS = [
    ("old-1", "old-worker"),
    ("new-1", "old-worker-on-new"),  # a previous SDK's worker on this server
    ("old-1", "new-worker-on-old"),  # this SDK's worker on the previous server
    ("new-1", "new-worker"),
]


def pairings(url: str) -> Counter[tuple[str, str]]:
    """Succeeded attempts by the server that leased them and the worker that ran them."""
    found = rows(url, "SELECT node, worker_id FROM task_attempts WHERE state = 'succeeded'")
    return Counter((str(node), str(worker_id)) for node, worker_id in found)


@pytest.mark.parametrize("database_url", ["mariadb"], indirect=True)
def test_a_rolling_upgrade_from_the_previous_release_loses_nothing(
    previous_release: Path, database_url: str, tmp_path: Path
) -> None:
    old_bin, new_bin = previous_release, Path(sys.executable).parent
    url, log = database_url, tmp_path / "handlers.log"
    (tmp_path / "upgrade_app.py").write_text(APP)
    env = {"ORBIT_DATABASE_URL": url}
    processes: list[OrbitProcess] = []

    def orbit(bin_dir: Path, *args: str) -> str:
        done = subprocess.run(
            [str(bin_dir / "orbit"), *args], capture_output=True, text=True,
            env=clean_env(env), timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    def server(bin_dir: Path, node: str) -> tuple[OrbitProcess, str]:
        proc = OrbitProcess.command(
            [str(bin_dir / "orbit"), "server", "--host", "127.0.0.1", "--port", "0",
             "--node-id", node],
            env={**env, **LEASE},
        )  # fmt: skip
        processes.append(proc)
        return proc, proc.wait_for("ORBIT_URL")["ORBIT_URL"]

    def worker(bin_dir: Path, name: str, *urls: str) -> OrbitProcess:
        command = [str(bin_dir / "orbit-worker"), "upgrade_app:worker", "--worker-id", name]
        for server_url in urls:
            command += ["--url", server_url]
        proc = OrbitProcess.command(
            [*command, "--concurrency", "4"],
            env={"ORBIT_API_KEY": key, "UPGRADE_LOG": str(log), "PYTHONPATH": str(tmp_path)},
        )
        processes.append(proc)
        return proc

    def connected(server_url: str, count: int) -> None:
        deadline = time.monotonic() + 30
        while True:
            answer = httpx2.get(
                f"{server_url}/v1/workers", headers={"Authorization": f"Bearer {key}"}
            ).json()
            if sum(1 for w in answer["items"] if w["status"] == "connected") >= count:
                return
            assert time.monotonic() < deadline, answer
            time.sleep(0.1)

    try:
        # -- the previous release, under load --------------------------------------------
        orbit(old_bin, "migrate")
        key = orbit(
            old_bin, "keys", "create", "--tenant", "acme", "--environment", "prod",
            "--role", "worker", "--role", "submitter", "--role", "operator",
        ).strip().splitlines()[-1]  # fmt: skip
        old_server, old_url = server(old_bin, "old-1")
        old_worker = worker(old_bin, "old-worker", old_url)
        submitter = Submitter([old_url], key)
        submitter.start()
        connected(old_url, 1)
        published = httpx2.post(
            f"{old_url}/v1/workflow-definitions", json=FLOW,
            headers={"Authorization": f"Bearer {key}"}, timeout=10,
        )  # fmt: skip
        assert published.status_code == 201, published.text
        flows = [start_flow(old_url, key, f"flow-old-{i}") for i in range(2)]

        # -- expand: this release's migrations while the old server serves ----------------
        early = subprocess.run(
            [str(new_bin / "orbit"), "server", "--port", "0"], capture_output=True, text=True,
            env=clean_env(env), timeout=60, check=False,
        )  # fmt: skip
        assert early.returncode == 2, early.stderr  # this release refuses the older schema
        assert "run `orbit migrate` first" in early.stderr
        applied = orbit(new_bin, "migrate")
        assert f"applied {current().migrations:04d}_" in applied, applied
        ready = httpx2.get(f"{old_url}/readyz")
        assert ready.status_code == 200, ready.text  # it tolerates the newer migrations

        # -- this release beside it; workers across releases --------------------------------
        _, new_url = server(new_bin, "new-1")
        submitter.urls = [new_url, old_url]
        crossed_old = worker(old_bin, "old-worker-on-new", new_url)
        worker(new_bin, "new-worker-on-old", old_url, new_url)  # moves on when old-1 stops
        worker(new_bin, "new-worker", new_url)
        connected(old_url, 2)
        connected(new_url, 2)
        flows += [start_flow(new_url, key, f"flow-new-{i}") for i in range(2)]
        # until each server has run work of each SDK release (the database says so)
        deadline = time.monotonic() + 30
        while not all(pairings(url)[p] for p in PAIRINGS):
            assert time.monotonic() < deadline, pairings(url)
            assert submitter.failure is None, submitter.failure
            time.sleep(0.1)

        # -- retire the previous release: drain its server, then its workers ------------------
        old_server.proc.send_signal(signal.SIGTERM)
        assert old_server.proc.wait(timeout=30) == 0, old_server.stderr[-3000:]
        submitter.urls = [new_url]
        for proc in (old_worker, crossed_old):
            proc.proc.send_signal(signal.SIGTERM)
        for proc in (old_worker, crossed_old):
            assert proc.proc.wait(timeout=30) == 0, proc.stderr[-3000:]
        submitter.wait_for(20)  # this release alone, its workers moved off the old server
        submitter.join()  # this release's workers settle what is left

        # -- what the database says ------------------------------------------------------------
        deadline = time.monotonic() + SETTLE_S
        unsettled = (
            "SELECT 'task', id, state FROM tasks WHERE state <> 'succeeded' UNION ALL "
            "SELECT 'workflow', id, state FROM workflows WHERE state <> 'succeeded' LIMIT 20"
        )
        while found := rows(url, unsettled):
            assert time.monotonic() < deadline, found
            time.sleep(0.1)
    finally:
        for proc in processes:
            if proc.proc.poll() is None:
                proc.proc.kill()
            proc.stop(timeout=10)

    tasks = rows(
        url,
        "SELECT idempotency_key, id, state, side_effect, attempts FROM tasks "
        "WHERE owner_kind IS NULL",
    )
    acknowledged = submitter.acknowledged
    assert len(tasks) == len(acknowledged) == submitter.n  # one task per key, none extra
    assert {k: i for k, i, *_ in tasks} == acknowledged  # each acknowledged id is the task
    assert {state for _, _, state, _, _ in tasks} == {"succeeded"}
    ran = Counter(line.split()[0] for line in log.read_text().splitlines())
    unsafe = [i for _, i, _, side_effect, _ in tasks if side_effect == "unsafe"]
    assert unsafe and all(ran[i] == 1 for i in unsafe)  # started at most once, and it ran
    assert all(ran[i] >= 1 for _, i, *_ in tasks)

    ran_by = pairings(url)
    assert all(ran_by[p] for p in PAIRINGS), ran_by
    steps = rows(url, "SELECT owner_id, state FROM tasks WHERE owner_kind = 'workflow'")
    assert sorted(flow for flow, _ in steps) == sorted(flows * 2)  # two steps each, once
    assert {state for _, state in steps} == {"succeeded"}
    assert sorted(rows(url, "SELECT id, state FROM workflows")) == sorted(
        (flow, "succeeded") for flow in flows
    )
    progress = rows(url, "SELECT node, worker_id FROM task_attempts WHERE progress IS NOT NULL")
    assert progress, "no progress report was stored"
    assert {node for node, _ in progress} == {"new-1"}  # a 0.1.0 server drops them
    assert {worker_id for _, worker_id in progress} <= {"new-worker", "new-worker-on-old"}
    releases_seen = Counter(line.split()[2] for line in log.read_text().splitlines())
    assert set(releases_seen) == {previous().version, current().version}
    print(
        f"{len(tasks)} tasks ({len(unsafe)} unsafe), {submitter.resent} re-sent submits, "
        f"{len(flows)} workflows; "
        f"attempts by (server, worker): {dict(ran_by)}"
    )
