"""Orbit on a replicated MariaDB, kill -9 of the database node it writes to under load.

Real processes throughout: a 3-node Galera cluster or a primary with a semi-synchronous
replica (tests/harness), ``orbit server`` processes on a multi-host URL, SDK workers started
with ``orbit-worker`` that write every start of a handler to a file, and submitters that send
tasks with idempotency keys and send a key again after any answer that is not an
acknowledgement. Afterwards, from the database and the workers' own records: every
acknowledged submit exists exactly once, every task settled, no ``unsafe`` task started
twice. Each scenario prints its figures (recovery time, conflicts, losses) as one JSON line;
docs/operations/database-ha.md quotes them.

These scenarios take minutes and start several database servers: they run only with
``ORBIT_TEST_FAILOVER=1``::

    ORBIT_TEST_FAILOVER=1 .venv/bin/pytest -s -p no:cacheprovider \\
        server/tests/e2e/test_database_failover.py
"""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.harness.galera import GaleraCluster
from tests.harness.nodes import ClusterNode, query
from tests.harness.replication import ReplicatedPair
from tests.support.processes import OrbitProcess, run_orbit

pytestmark = [
    pytest.mark.skipif(
        not os.environ.get("ORBIT_TEST_FAILOVER"),
        reason="long failover scenarios on replicated databases: set ORBIT_TEST_FAILOVER=1",
    ),
    pytest.mark.timeout(900),
]

LEASE = {
    "ORBIT_LEASE_MS": "3000",
    "ORBIT_HEARTBEAT_MS": "500",
    "ORBIT_HANDSHAKE_TIMEOUT_MS": "3000",
}
SETTLED = {"succeeded", "failed", "cancelled", "needs_review"}
RECOVERY_BOUND_S = 30.0  # Orbit must be ready on another node within this (measured: far less)
QUEUE = "ha"

APP = """
import os
import pathlib

from orbit_sdk.worker import TaskContext, Worker

worker = Worker()
LOG = pathlib.Path(os.environ["HA_LOG"])


@worker.handler(queue="ha", type="work")
def work(ctx: TaskContext) -> dict:
    with LOG.open("a") as log:
        log.write(f"start {ctx.task_id} {ctx.attempt} {os.getpid()}\\n")
    return {"n": ctx.params.get("n")}
"""


@dataclass
class Submitter:
    """Threads that submit tasks with idempotency keys through the given Orbit servers, half
    of them ``unsafe``, and send a key again until it is acknowledged (201 or 200)."""

    urls: Sequence[str]
    key: str
    prefix: str
    acked: dict[str, str] = field(default_factory=dict)  # idempotency key -> task id
    acked_at: list[float] = field(default_factory=list)
    resent: int = 0
    refused: collections.Counter[str] = field(default_factory=collections.Counter)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, threads_per_url: int = 2) -> None:
        for i, url in enumerate(self.urls):
            for j in range(threads_per_url):
                thread = threading.Thread(target=self._run, args=(url, f"{i}.{j}"), daemon=True)
                self._threads.append(thread)
                thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)

    def _run(self, url: str, lane: str) -> None:
        auth = {"Authorization": f"Bearer {self.key}"}
        with httpx2.Client(base_url=url, timeout=15, headers=auth) as client:
            n = 0
            while not self._stop.is_set():
                n += 1
                key = f"{self.prefix}-{lane}-{n}"
                body = {
                    "queue": QUEUE,
                    "type": "work",
                    "params": {"n": n},
                    "idempotency_key": key,
                    "side_effect": "unsafe" if n % 2 else "idempotent",
                }
                # An answer that is not an acknowledgement is ambiguous: send the key again
                # (also after the load stops: a submit is either acknowledged or abandoned
                # before it was ever acknowledged, never left in between).
                for attempt in range(600):
                    if attempt:
                        with self._lock:
                            self.resent += 1
                        time.sleep(0.1)
                    try:
                        answer = client.post("/v1/tasks", json=body)
                    except httpx2.TransportError as exc:
                        self._refuse(type(exc).__name__)
                        continue
                    if answer.status_code in (200, 201):
                        with self._lock:
                            self.acked[key] = answer.json()["id"]
                            self.acked_at.append(time.monotonic())
                        break
                    self._refuse(str(answer.status_code))

    def _refuse(self, why: str) -> None:
        with self._lock:
            self.refused[why] += 1

    def longest_gap_after(self, moment: float, window_s: float = 10.0) -> float:
        """The longest wait for an acknowledgement in the ``window_s`` after ``moment``: from
        ``moment`` to the first one, or between two consecutive ones."""
        with self._lock:
            times = sorted(t for t in self.acked_at if moment <= t <= moment + window_s)
        if not times:
            return float("inf")
        return max(b - a for a, b in zip([moment, *times], times, strict=False))


@dataclass
class Orbit:
    """Orbit processes on one database: servers and SDK workers."""

    tmp: Path
    url: str  # ORBIT_DATABASE_URL of the first server
    servers: list[OrbitProcess] = field(default_factory=list)
    workers: list[OrbitProcess] = field(default_factory=list)
    key: str = ""
    http: list[str] = field(default_factory=list)

    @property
    def log(self) -> Path:
        return self.tmp / "starts.log"

    def migrate_and_key(self) -> None:
        env = {"ORBIT_DATABASE_URL": self.url}
        migrated = run_orbit("migrate", env=env, timeout=120)
        assert migrated.code == 0, migrated.stderr
        created = run_orbit(
            "keys", "create", "--tenant", "acme", "--environment", "prod",
            "--role", "worker", "--role", "submitter", "--role", "operator", env=env,
        )  # fmt: skip
        assert created.code == 0, created.stderr
        self.key = created.stdout.strip().splitlines()[-1]
        (self.tmp / "ha_app.py").write_text(APP)

    def server(self, node_id: str, database_url: str | None = None) -> str:
        env = {"ORBIT_DATABASE_URL": database_url or self.url, **LEASE}
        proc = OrbitProcess(
            ["server", "--port", "0", "--host", "127.0.0.1", "--node-id", node_id], env=env
        )
        self.servers.append(proc)
        url = proc.wait_for("ORBIT_URL", timeout=60)["ORBIT_URL"]
        self.http.append(url)
        return url

    def worker(self, concurrency: int = 8) -> None:
        command = [str(Path(sys.executable).parent / "orbit-worker"), "ha_app:worker"]
        for url in self.http:
            command += ["--url", url]
        command += ["--concurrency", str(concurrency), "--log-level", "warning"]
        env = {"ORBIT_API_KEY": self.key, "HA_LOG": str(self.log), "PYTHONPATH": str(self.tmp)}
        self.workers.append(OrbitProcess.command(command, env=env))

    def stop(self) -> None:
        for proc in [*self.workers, *self.servers]:
            try:
                proc.stop(timeout=30)
            except Exception:  # stop the rest regardless
                proc.proc.kill()

    def readiness(self, url: str) -> tuple[int, dict[str, str]]:
        try:
            answer = httpx2.get(f"{url}/readyz", timeout=5)
        except httpx2.TransportError:
            return 0, {}
        return answer.status_code, answer.json().get("checks", {})

    def wait_ready_elsewhere(self, url: str, away_from: str, within_s: float) -> float:
        """Seconds until ``url`` is ready on a database node other than ``away_from``."""
        started = time.monotonic()
        while time.monotonic() - started < within_s:
            status, checks = self.readiness(url)
            if status == 200 and checks.get("database_node") not in (None, away_from):
                return time.monotonic() - started
            time.sleep(0.05)
        raise AssertionError(f"{url} not ready on another node within {within_s} s")

    def starts(self) -> collections.Counter[str]:
        if not self.log.exists():
            return collections.Counter()
        return collections.Counter(line.split()[1] for line in self.log.read_text().splitlines())


@pytest.fixture
def orbit(tmp_path: Path) -> Iterator[Callable[[str], Orbit]]:
    made: list[Orbit] = []

    def make(url: str) -> Orbit:
        made.append(Orbit(tmp_path, url))
        return made[-1]

    yield make
    for each in made:
        each.stop()


def rows(node: ClusterNode, prefix: str) -> list[list[str]]:
    return query(
        node,
        "SELECT idempotency_key, id, state, side_effect FROM orbit_test.tasks"
        f" WHERE idempotency_key LIKE '{prefix}-%'",
    )


def check_invariants(
    node: ClusterNode, orbit: Orbit, submitter: Submitter, within_s: float = 180
) -> dict[str, Any]:
    """Wait for every task to settle; then every acknowledged submit that exists, exists
    exactly once with the acknowledged id. Answers the figures: acknowledged submits missing
    (lost) and unsafe tasks started twice are counted, not asserted here: whether a topology
    may lose them is the scenario's to say."""
    deadline = time.monotonic() + within_s
    while True:
        found = rows(node, submitter.prefix)
        if all(r[2] in SETTLED for r in found) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    by_key: dict[str, list[list[str]]] = collections.defaultdict(list)
    for row in found:
        by_key[row[0]].append(row)
    assert all(len(v) == 1 for v in by_key.values()), "one task per idempotency key"
    lost = sorted(k for k in submitter.acked if k not in by_key)
    for key, task_id in submitter.acked.items():
        if key in by_key:
            assert by_key[key][0][1] == task_id, f"{key}: acknowledged {task_id}, found another"
    unsettled = [r for r in found if r[2] not in SETTLED]
    assert unsettled == [], f"{len(unsettled)} tasks did not settle: {unsettled[:5]}"
    starts = orbit.starts()
    unsafe_ids = {r[1] for r in found if r[3] == "unsafe"}
    twice = {t: n for t, n in starts.items() if t in unsafe_ids and n > 1}
    states = collections.Counter(r[2] for r in found)
    return {
        "acknowledged": len(submitter.acked),
        "tasks": len(found),
        "states": dict(states),
        "lost_acknowledged": len(lost),
        "unsafe_started_twice": len(twice),
        "resent": submitter.resent,
        "refused": dict(submitter.refused),
        "idempotent_started_twice": sum(
            1 for t, n in starts.items() if n > 1 and t not in unsafe_ids
        ),
    }


def node_at(nodes: Sequence[ClusterNode], address: str) -> ClusterNode:
    [found] = [n for n in nodes if n.endpoint() == address]
    return found


def report(name: str, figures: dict[str, Any]) -> None:
    line = json.dumps({"scenario": name, **figures}, sort_keys=True)
    print(line)
    target = os.environ.get("ORBIT_FAILOVER_REPORT")
    if target:
        with Path(target).open("a") as out:
            out.write(line + "\n")


# --------------------------------------------------------------------------------------------
# Galera
# --------------------------------------------------------------------------------------------


def galera_counters(nodes: Sequence[ClusterNode]) -> dict[str, int]:
    totals: collections.Counter[str] = collections.Counter()
    for node in nodes:
        if not node.running:
            continue
        for name, value in query(
            node,
            "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_cert_failures',"
            " 'wsrep_local_bf_aborts', 'wsrep_replicated', 'wsrep_local_commits')",
        ):
            totals[name] += int(value)
    return dict(totals)


def test_galera_kill_the_node_in_use_under_load(orbit: Callable[[str], Orbit]) -> None:
    with GaleraCluster() as cluster:
        system = orbit(cluster.url())
        system.migrate_and_key()
        url = system.server("s1")
        system.worker()
        submitter = Submitter([url], system.key, "galera")
        submitter.start()
        recoveries: list[dict[str, Any]] = []
        try:
            for _ in range(3):
                time.sleep(5)
                status, checks = system.readiness(url)
                assert status == 200, checks
                assert checks["database_role"] == "galera synced"
                victim = node_at(cluster.nodes, checks["database_node"])
                killed_at = time.monotonic()
                victim.kill()
                ready_s = system.wait_ready_elsewhere(url, victim.endpoint(), RECOVERY_BOUND_S)
                time.sleep(3)
                recoveries.append(
                    {
                        "killed": victim.name,
                        "ready_after_s": round(ready_s, 2),
                        "longest_ack_gap_s": round(submitter.longest_gap_after(killed_at), 2),
                    }
                )
                survivor = next(n for n in cluster.nodes if n.running)
                cluster.start(victim, donor=survivor)  # rejoins; next round kills another
        finally:
            submitter.stop()
        figures = check_invariants(cluster.nodes[0], system, submitter)
        figures["kills"] = recoveries
        report("galera kill -9 of the node in use", figures)
        assert figures["lost_acknowledged"] == 0
        assert figures["unsafe_started_twice"] == 0


def test_galera_two_servers_writing_through_two_nodes(orbit: Callable[[str], Orbit]) -> None:
    with GaleraCluster() as cluster:
        a, b, c = cluster.nodes
        system = orbit(cluster.url(nodes=[a, b, c]))
        system.migrate_and_key()
        first = system.server("s1")
        second = system.server("s2", cluster.url(nodes=[b, a, c]))
        assert system.readiness(first)[1]["database_node"] == a.endpoint()
        assert system.readiness(second)[1]["database_node"] == b.endpoint()
        system.worker()
        before = galera_counters(cluster.nodes)
        submitter = Submitter([first, second], system.key, "multi")
        submitter.start()
        try:
            time.sleep(30)
        finally:
            submitter.stop()
        figures = check_invariants(a, system, submitter)
        after = galera_counters(cluster.nodes)
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        commits = max(1, delta.get("wsrep_replicated", 0))
        conflicts = delta.get("wsrep_local_cert_failures", 0) + delta.get(
            "wsrep_local_bf_aborts", 0
        )
        figures["galera"] = delta
        figures["conflicts_per_1000_commits"] = round(1000 * conflicts / commits, 2)
        report("galera two writers on two nodes", figures)
        assert figures["lost_acknowledged"] == 0
        assert figures["unsafe_started_twice"] == 0


# --------------------------------------------------------------------------------------------
# Primary and (semi-)synchronous replica
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("semi_sync", [True, False], ids=["semi-sync", "async"])
@pytest.mark.parametrize("replica_behind", [False, True], ids=["replica-current", "replica-cut"])
def test_primary_kill_and_promotion(
    orbit: Callable[[str], Orbit], semi_sync: bool, replica_behind: bool
) -> None:
    """kill -9 of the primary under load, then the operator promotes the replica. With
    ``replica_behind``, the replica stopped receiving (its IO thread stopped) three seconds
    before the kill, as when the link between the two fails first."""
    with ReplicatedPair(semi_sync=semi_sync) as pair:
        system = orbit(pair.url())
        system.migrate_and_key()
        url = system.server("s1")
        system.worker()
        submitter = Submitter([url], system.key, "pair")
        submitter.start()
        try:
            time.sleep(5)
            assert system.readiness(url)[1]["database_node"] == pair.primary.endpoint()
            if replica_behind:
                pair.replica.sql("STOP SLAVE IO_THREAD;")
                assert query(pair.replica, "SHOW SLAVE STATUS")[0][10] == "No"  # Slave_IO
                time.sleep(3)
            semi_sync_state = pair.status(pair.primary, "Rpl_semi_sync_master_status")
            acked_before_kill = len(submitter.acked)
            killed_at = time.monotonic()
            pair.primary.kill()
            if replica_behind:
                pair.replica.sql("START SLAVE IO_THREAD;")  # nothing left to fetch
            promote_s = pair.promote()
            ready_s = system.wait_ready_elsewhere(url, pair.primary.endpoint(), RECOVERY_BOUND_S)
            ready_after_kill_s = time.monotonic() - killed_at
            time.sleep(5)
        finally:
            submitter.stop()
        figures = check_invariants(pair.replica, system, submitter)
        figures.update(
            semi_sync=semi_sync,
            replica_cut_3s_before_kill=replica_behind,
            semi_sync_status_at_kill=semi_sync_state,
            acknowledged_before_kill=acked_before_kill,
            promote_s=round(promote_s, 2),
            ready_after_kill_s=round(ready_after_kill_s, 2),
            ready_after_promotion_s=round(ready_s, 2),
            longest_ack_gap_s=round(submitter.longest_gap_after(killed_at), 2),
        )
        report("primary kill -9 and promotion", figures)
        if semi_sync:
            assert figures["lost_acknowledged"] == 0
            assert figures["unsafe_started_twice"] == 0
