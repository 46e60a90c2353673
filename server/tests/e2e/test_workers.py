"""Workers end to end on MariaDB, with real processes: ``orbit server`` processes and SDK
workers started with ``orbit-worker``, as a user runs them. Leases are short (2 s) so that
losing one takes a moment; the handlers write what they do to a log file that the tests
read."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

import orbit_sdk
from orbit_sdk import RetryPolicy
from orbit_server.governance.keys import Role, parse_token
from tests.conftest import SCOPE, make_key_at
from tests.support.processes import OrbitProcess

LEASE = {
    "ORBIT_LEASE_MS": "2000",
    "ORBIT_HEARTBEAT_MS": "500",
    "ORBIT_HANDSHAKE_TIMEOUT_MS": "2000",
    "ORBIT_DRAIN_GRACE_MS": "5000",
}
FAST_RETRY = RetryPolicy(max_attempts=3, initial_backoff_ms=50, max_backoff_ms=50)
# The key the workers and the test's client use (made in-process: `orbit migrate` and
# `orbit keys create` have tests of their own in test_cli.py).
ROLES = (Role.WORKER, Role.SUBMITTER, Role.OPERATOR)

APP = '''
import os
import pathlib

from orbit_sdk.worker import TaskContext, Worker

worker = Worker()
LOG = pathlib.Path(os.environ["E2E_LOG"])
RELEASE = pathlib.Path(os.environ["E2E_RELEASE"])


def record(event: str, ctx: TaskContext) -> None:
    with LOG.open("a") as log:
        log.write(f"{event} {ctx.task_id} {ctx.attempt} {os.getpid()}\\n")


@worker.handler(queue="e2e", type="noop")
def noop(ctx: TaskContext) -> dict:
    return {"n": ctx.params.get("n")}


@worker.handler(queue="e2e", type="fair")
def fair(ctx: TaskContext) -> None:
    with LOG.open("a") as log:
        log.write(f"fair {ctx.params['key']} {ctx.attempt} {os.getpid()}\\n")


@worker.handler(queue="e2e", type="hold")
def hold(ctx: TaskContext) -> dict:
    """Runs until the release file appears or the task is cancelled."""
    record("start", ctx)
    while not ctx.cancel_event.wait(0.02):
        if RELEASE.exists():
            record("done", ctx)
            return {"attempt": ctx.attempt}
    record("cancelled", ctx)
    ctx.raise_if_cancelled()
    return {}
'''


@dataclass
class Cluster:
    env: dict[str, str]
    key: str
    tmp: Path
    servers: list[OrbitProcess]
    workers: list[OrbitProcess]

    @property
    def log(self) -> Path:
        return self.tmp / "handlers.log"

    @property
    def release(self) -> Path:
        return self.tmp / "release"

    def server(self, node_id: str, **env: str) -> str:
        proc = OrbitProcess(
            ["server", "--port", "0", "--host", "127.0.0.1", "--node-id", node_id],
            env={**self.env, **LEASE, **env},
        )
        self.servers.append(proc)
        return proc.wait_for("ORBIT_URL")["ORBIT_URL"]

    def worker(self, *urls: str, concurrency: int = 4, log_level: str = "info") -> OrbitProcess:
        command = [str(Path(sys.executable).parent / "orbit-worker"), "e2e_app:worker"]
        for url in urls:
            command += ["--url", url]
        command += ["--concurrency", str(concurrency), "--log-level", log_level]
        env = {
            "ORBIT_API_KEY": self.key,
            "E2E_LOG": str(self.log),
            "E2E_RELEASE": str(self.release),
            "PYTHONPATH": str(self.tmp),
        }
        proc = OrbitProcess.command(command, env=env)
        self.workers.append(proc)
        return proc

    def client(self, url: str) -> orbit_sdk.Client:
        return orbit_sdk.Client(url, self.key)

    def events(self, kind: str) -> list[tuple[str, int, int]]:
        if not self.log.exists():
            return []
        found = []
        for line in self.log.read_text().splitlines():
            event, task_id, attempt, pid = line.split()
            if event == kind:
                found.append((task_id, int(attempt), int(pid)))
        return found


def eventually(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    """Poll an observable outcome of other processes (a log file, a task's state)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
async def cluster(migrated_mariadb_url: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    env = {"ORBIT_DATABASE_URL": migrated_mariadb_url}
    key = await make_key_at(migrated_mariadb_url, SCOPE, *ROLES)
    (tmp_path / "e2e_app.py").write_text(APP)
    found = Cluster(env, key, tmp_path, [], [])
    try:
        yield found
    finally:
        for proc in found.workers + found.servers:
            if proc.proc.poll() is None:
                proc.proc.kill()
            proc.stop(timeout=10)


def hold_tasks(client: orbit_sdk.Client, count: int, side_effect: str) -> list[str]:
    return [
        client.submit("e2e", "hold", {}, side_effect=side_effect, retry=FAST_RETRY).id  # type: ignore[arg-type]
        for _ in range(count)
    ]


def test_tasks_run_through_a_real_worker(cluster: Cluster) -> None:
    url = cluster.server("a")
    cluster.worker(url)
    with cluster.client(url) as client:
        tasks = client.submit_many([{"queue": "e2e", "type": "noop", "params": {"n": i}}
                                    for i in range(40)])  # fmt: skip
        done = [client.wait_for_task(t.id, timeout=30) for t in tasks]
    assert [(t.state, t.result) for t in done] == [("succeeded", {"n": i}) for i in range(40)]


def test_a_killed_worker_retries_idempotent_work_and_never_reruns_unsafe_work(
    cluster: Cluster,
) -> None:
    url = cluster.server("a")
    first = cluster.worker(url)
    with cluster.client(url) as client:
        [safe] = hold_tasks(client, 1, "idempotent")
        [unsafe] = hold_tasks(client, 1, "unsafe")
        eventually(lambda: len(cluster.events("start")) == 2, "both tasks to start")
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
        cluster.release.touch()
        cluster.worker(url)
        assert client.wait_for_task(unsafe, timeout=30).state == "needs_review"
        retried = client.wait_for_task(safe, timeout=30)
    assert (retried.state, retried.result) == ("succeeded", {"attempt": 2})
    starts = cluster.events("start")
    assert sorted(a for t, a, _ in starts if t == safe) == [1, 2]
    assert [a for t, a, _ in starts if t == unsafe] == [1]  # never run twice


def test_a_cancel_reaches_a_running_handler(cluster: Cluster) -> None:
    url = cluster.server("a")
    cluster.worker(url)
    with cluster.client(url) as client:
        [task_id] = hold_tasks(client, 1, "unsafe")
        eventually(lambda: len(cluster.events("start")) == 1, "the task to start")
        assert client.cancel_task(task_id, reason="stop").cancel_requested
        assert client.wait_for_task(task_id, timeout=30).state == "cancelled"
    assert [t for t, _, _ in cluster.events("cancelled")] == [task_id]


@pytest.mark.parametrize("concurrency", [1, 2])
def test_fairness_holds_for_small_claims_on_two_servers(cluster: Cluster, concurrency: int) -> None:
    """The reproduction of a starved key: 30 tasks of A submitted before 5 of B while the
    queue is paused, then one worker on each of two servers sharing the database, at
    concurrency 1 and 2 — their credits come back one at a time, so every claim takes one or
    two tasks. B's tasks start among the first ones, taking turns with A's (SPEC P7)."""
    url_a, url_b = cluster.server("a"), cluster.server("b")
    with cluster.client(url_a) as client:
        client.update_queue("e2e", paused=True)
        tasks = client.submit_many(
            [{"queue": "e2e", "type": "fair", "params": {"key": "A"}, "fairness_key": "A"}
             for _ in range(30)]
            + [{"queue": "e2e", "type": "fair", "params": {"key": "B"}, "fairness_key": "B"}
               for _ in range(5)]
        )  # fmt: skip
        cluster.worker(url_a, concurrency=concurrency)
        cluster.worker(url_b, concurrency=concurrency)
        eventually(
            lambda: sum(q.workers for q in client.list_queues() if q.name == "e2e") == 2,
            "both workers to connect",
        )
        client.update_queue("e2e", paused=False)
        for task in tasks:
            assert client.wait_for_task(task.id, timeout=60).state == "succeeded"
    order = "".join(key for key, _, _ in cluster.events("fair"))
    assert sorted(order) == ["A"] * 30 + ["B"] * 5
    # B starts among the first claims and keeps getting turns while A waits behind it (the
    # strict one-node alternation is the service test's; across two busy nodes a claim may
    # find B's next task held by the other node's claim and take A).
    assert order.index("B") < 4 and order[:12].count("B") >= 3, order


def test_no_api_key_reaches_a_debug_log(cluster: Cluster) -> None:
    """Server and worker at DEBUG, where websockets logs the upgrade request's headers and
    uvicorn its connections: the key is in none of their lines, and neither is its secret."""
    url = cluster.server("a", ORBIT_LOG_LEVEL="debug")
    worker = cluster.worker(url, log_level="debug")
    with cluster.client(url) as client:
        [task] = client.submit_many([{"queue": "e2e", "type": "noop", "params": {"n": 1}}])
        assert client.wait_for_task(task.id, timeout=30).state == "succeeded"
    worker.stop()
    cluster.servers[0].stop()
    parsed = parse_token(cluster.key)
    assert parsed is not None
    secret = parsed[1]  # ok_<id>_<secret>; the secret may hold "_" itself
    worker_log, server_log = worker.stderr, cluster.servers[0].stderr
    assert "Authorization: Bearer ***" in worker_log  # the handshake's headers were logged
    assert "DEBUG" in server_log.upper()
    for log in (worker_log, server_log):
        assert cluster.key not in log and secret not in log


def test_work_submitted_on_one_node_runs_on_a_worker_of_another(cluster: Cluster) -> None:
    url_a, url_b = cluster.server("a"), cluster.server("b")
    cluster.worker(url_b)
    with cluster.client(url_a) as client:
        task = client.submit("e2e", "noop", {"n": 7})
        assert client.wait_for_task(task.id, timeout=30).result == {"n": 7}


def test_a_node_killed_under_its_workers_loses_nothing_and_runs_nothing_twice(
    cluster: Cluster,
) -> None:
    url_a, url_b = cluster.server("a"), cluster.server("b")
    cluster.worker(url_a, url_b, concurrency=8)
    with cluster.client(url_b) as client:
        tasks = hold_tasks(client, 3, "unsafe") + hold_tasks(client, 3, "idempotent")
        eventually(lambda: len(cluster.events("start")) == 6, "all six tasks to start")
        cluster.servers[0].proc.send_signal(signal.SIGKILL)  # node a, the worker's node
        cluster.servers[0].proc.wait()
        # The worker reconnects to b, which lets each held attempt continue; the results
        # reach b (sent again until acknowledged).
        cluster.release.touch()
        done = [client.wait_for_task(t, timeout=30) for t in tasks]
    assert [(t.state, t.attempts) for t in done] == [("succeeded", 1)] * 6
    assert sorted(t for t, _, _ in cluster.events("start")) == sorted(tasks)


def test_a_worker_partitioned_past_its_lease_cannot_complete(cluster: Cluster) -> None:
    url = cluster.server("a")
    stuck = cluster.worker(url, concurrency=1)
    with cluster.client(url) as client:
        [task_id] = hold_tasks(client, 1, "idempotent")
        eventually(lambda: len(cluster.events("start")) == 1, "the first attempt to start")
        os.kill(stuck.proc.pid, signal.SIGSTOP)  # cut off: no heartbeats, no results
        cluster.worker(url, concurrency=1)
        eventually(
            lambda: [a for _, a, _ in cluster.events("start")] == [1, 2],
            "the task to be leased again and started elsewhere",
        )
        cluster.release.touch()
        finished = client.wait_for_task(task_id, timeout=30)
        os.kill(stuck.proc.pid, signal.SIGCONT)
        # A graceful stop sends whatever the stale worker still has to report, then exits.
        assert stuck.stop(timeout=30) == 0
        again = client.get_task(task_id)
    assert (finished.state, finished.result) == ("succeeded", {"attempt": 2})
    assert (again.result, again.attempts) == ({"attempt": 2}, 2)  # the stale report changed nothing


def test_the_example_worker_runs_against_orbit_dev(tmp_path: Path) -> None:
    """The README's path: ``orbit dev`` on SQLite, the SDK's example worker, a submit."""
    dev = OrbitProcess(["dev", "--data-dir", str(tmp_path / "data"), "--port", "0"])
    try:
        announced = dev.wait_for("ORBIT_URL", "ORBIT_API_KEY")
        env = {"ORBIT_URL": announced["ORBIT_URL"], "ORBIT_API_KEY": announced["ORBIT_API_KEY"]}
        example = Path(__file__).resolve().parents[3] / "sdk" / "examples" / "worker_basic.py"
        worker = OrbitProcess.command(
            [str(Path(sys.executable).parent / "orbit-worker"), str(example)], env=env
        )
        try:
            with orbit_sdk.Client(env["ORBIT_URL"], env["ORBIT_API_KEY"]) as client:
                added = client.submit("examples", "add", {"a": 2, "b": 3})
                greeted = client.submit(
                    "examples", "greet", {"name": "Ada"},
                    traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                )  # fmt: skip
                assert client.wait_for_task(added.id, timeout=30).result == {"sum": 5}
                assert client.wait_for_task(greeted.id, timeout=30).result == {
                    "greeting": "Hello, Ada!"
                }
        finally:
            assert worker.stop() == 0
    finally:
        assert dev.stop() == 0


def test_one_server_command_runs_several_processes(cluster: Cluster) -> None:
    proc = OrbitProcess(
        ["server", "--port", "0", "--host", "127.0.0.1", "--node-id", "multi", "--processes", "2"],
        env={**cluster.env, **LEASE},
    )
    cluster.servers.append(proc)
    url = proc.wait_for("ORBIT_URL")["ORBIT_URL"]
    cluster.worker(url)
    cluster.worker(url)
    with cluster.client(url) as client:
        tasks = client.submit_many([{"queue": "e2e", "type": "noop", "params": {"n": i}}
                                    for i in range(20)])  # fmt: skip
        done = [client.wait_for_task(t.id, timeout=30) for t in tasks]
        nodes = {a.node for t in tasks for a in client.task_attempts(t.id)}
    assert all(t.state == "succeeded" for t in done)
    assert nodes and nodes <= {"multi-1", "multi-2"}
    assert proc.stop() == 0  # the signal reaches both processes, which drain and exit


@pytest.mark.parametrize("setting", ["off", "deflate"])
def test_worker_connections_are_compressed_only_when_configured(
    cluster: Cluster, setting: str
) -> None:
    proc = OrbitProcess(
        ["server", "--port", "0", "--host", "127.0.0.1", "--ws-compression", setting],
        env=cluster.env,
    )
    cluster.servers.append(proc)
    url = proc.wait_for("ORBIT_URL")["ORBIT_URL"]

    async def negotiated() -> str:
        headers = {"Authorization": f"Bearer {cluster.key}"}
        ws_url = url.replace("http", "ws", 1) + "/v1/worker"
        async with connect(ws_url, additional_headers=headers) as ws:  # offers permessage-deflate
            assert ws.response is not None
            return ws.response.headers.get("Sec-WebSocket-Extensions", "")

    assert ("permessage-deflate" in asyncio.run(negotiated())) == (setting == "deflate")
