"""``python -m bench chaos``: Orbit under faults, then checked.

A private MariaDB, ``--servers`` ``orbit server`` processes on it and ``--workers`` SDK worker
processes (``bench.chaos_worker``, each with every server in its ``ORBIT_URL``, its own first).
Client threads submit a mixed load over HTTP — idempotent tasks, ``unsafe`` tasks, tasks with a
concurrency key (per-key limit 1) and tasks on a queue with a concurrency limit — each with an
idempotency key, re-sent with the same key and body after every ambiguous answer (timeout,
connection error, 5xx, 429) until a definite one. Meanwhile a seeded schedule ``kill -9``\\ s
and ``SIGSTOP``\\ s servers, workers and the database (``bench.chaos_faults``). Then the faults
stop, the run settles, and ``bench.chaos_checks`` checks the database and the workers' records.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import statistics
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import asyncmy
import httpx2

from bench import report
from bench.baseline import _connect_args
from bench.chaos_checks import Check, check_all, read_facts, read_records
from bench.chaos_databases import (
    TOPOLOGIES,
    Database,
    database_nodes,
    open_database,
    ready_elsewhere,
)
from bench.chaos_faults import (
    Fault,
    Injector,
    ServerTarget,
    Topology,
    WorkerTarget,
    plan,
)
from bench.chaos_load import MIX, Load
from bench.databases import SERVER_OPTIONS, data_parent
from bench.storage import database_facts, on_memory
from bench.throughput import _migrate_and_make_key
from tests.harness.mariadb import free_port

ROOT = Path(__file__).resolve().parents[1]
TENANT = ENVIRONMENT = "bench"
LEASE_MS = 4000
HEARTBEAT_MS = 1000
HOST = socket.gethostname()  # the SDK's worker id is <host>:<pid>
# The database of a chaos run is small; no need for the benchmarks' 1 GiB buffer pool.
DB_OPTIONS = (*SERVER_OPTIONS, "--innodb-buffer-pool-size=256M", "--innodb-log-file-size=96M")


DESCRIBED = {
    "single": "one MariaDB",
    "galera": "a 3-node MariaDB Galera cluster (single writer)",
    "semisync": "a MariaDB primary with a semi-synchronous replica",
}


@dataclass(frozen=True)
class Profile:
    name: str
    load_s: float  # how long tasks are submitted, faults injected meanwhile
    rate: float  # tasks submitted per second
    faults: int
    settle_s: float  # the bound of the settling wait
    clients: int = 4


PROFILES = {
    "short": Profile("short", load_s=60, rate=12, faults=7, settle_s=90),
    "medium": Profile("medium", load_s=300, rate=12, faults=30, settle_s=180),
    "long": Profile("long", load_s=660, rate=14, faults=70, settle_s=180),
}


@dataclass
class Recovery:
    """Recovery times measured after faults."""

    released: list[dict[str, Any]]  # after a server or worker was killed or stopped
    database_ready: list[dict[str, Any]]


class Run:
    """One chaos run: the topology, the load, the faults, the settling and the checks."""

    def __init__(
        self, profile: Profile, seed: int, servers: int, workers: int, topology: str = "single"
    ) -> None:
        self.profile = profile
        self.topology_name = topology
        self.seed = seed
        self.n_servers = servers
        self.n_workers = workers
        self.database: Database | None = None
        self.windows: list[tuple[float, float]] = []
        self.recovery = Recovery([], [])
        self.began = 0.0

    # -- recovery measurements, in the injector's thread ----------------------------------

    def before(self, fault: Fault, target: Any) -> threading.Thread | None:
        """Just before a fault of a server or a worker: read the tasks it holds (leased or
        running: through a server, those of its node; through a worker, those of its worker
        id) and watch them, from the fault on, in a thread of its own."""
        if fault.kind == "database":
            if not hasattr(target, "replicated") or not target.replicated(fault.action):
                return None
            urls = [s.url for s in self.topology.servers]
            away = target.address
            watch = threading.Thread(
                target=lambda: fault.recovery.update(_elsewhere(fault, urls, away)), daemon=True
            )
            watch.start()
            return watch
        column, value = ("node", target.node) if fault.kind == "server" else (
            "worker_id", f"{HOST}:{target.pid()}")  # fmt: skip
        url = self.read_url()
        held = asyncio.run(_held(url, column, value))
        watch = threading.Thread(
            target=lambda: fault.recovery.update(asyncio.run(_released(url, fault, held))),
            daemon=True,
        )
        watch.start()
        return watch

    def recover(self, fault: Fault, target: Any, watch: threading.Thread | None) -> None:
        if fault.kind == "database":
            if watch is not None:  # a replicated database: Orbit moved to another node
                watch.join()
                fault.recovery["fault"] = fault.action
                promotion = getattr(target, "promotion_s", None)
                if promotion is not None and fault.action == "kill":
                    fault.recovery["promotion_s"] = round(promotion, 2)
            else:
                fault.recovery = self._ready_again(fault)
            fault.recovery["node"] = fault.node or fault.target
            # An outage only while no node could take a write: a single database, the primary
            # until the replica is promoted, a Galera cluster left without a primary component.
            if not getattr(target, "survivors_primary", False):
                self.windows.append((fault.began, fault.ended))
                fault.recovery["no writable node"] = True
            self.recovery.database_ready.append(fault.recovery)
        elif watch is not None:
            watch.join()
            if fault.action == "kill" or fault.past_lease:
                self.recovery.released.append(fault.recovery)

    def _ready_again(self, fault: Fault) -> dict[str, Any]:
        """From the restart (or SIGCONT) of the database to every server's ``/readyz`` 200."""
        urls = {s.url for s in self.topology.servers}
        deadline = time.monotonic() + 60
        ready_at: dict[str, float] = {}
        with httpx2.Client(timeout=1.0) as http:
            while urls - ready_at.keys() and time.monotonic() < deadline:
                for url in urls - ready_at.keys():
                    try:
                        if http.get(f"{url}/readyz").status_code == 200:
                            ready_at[url] = time.time()
                    except httpx2.TransportError:
                        pass
                time.sleep(0.05)  # polling the servers: their state changes on their own
        down = fault.ended - fault.began
        if urls - ready_at.keys():
            return {"fault": fault.action, "down_s": round(down, 2), "ready_s": None}
        return {"fault": fault.action, "down_s": round(down, 2),
                "restart_s": round(fault.restarted - fault.ended, 2),
                "ready_s": round(max(ready_at.values()) - fault.ended, 2)}  # fmt: skip

    # -- the run ----------------------------------------------------------------------------

    def read_url(self) -> str:
        assert self.database is not None
        return self.database.read_url()

    def execute(self, out: Path, allow_tmpfs: bool) -> int:
        self.database = open_database(self.topology_name, data_parent(), DB_OPTIONS)
        try:
            self.database.start("bench_chaos")
            facts = database_facts(self.database.any_server().url(), private=True)
            facts["tmpfs_allowed"] = allow_tmpfs
            facts["topology"] = self.topology_name
            if on_memory(facts) and not allow_tmpfs:
                print("python -m bench chaos: refused: the database's data is on a memory "
                      "filesystem; pass --allow-tmpfs to run anyway")  # fmt: skip
                return 2
            with tempfile.TemporaryDirectory(prefix="orbit-chaos-") as folder:
                document, body, passed = self._execute(self.database, Path(folder))
        finally:
            self.database.cleanup()
        path = report.write(out, "chaos", "Chaos", facts, document, body)
        print(f"report: {path}")
        return 0 if passed else 1

    def _execute(self, database: Database, records: Path) -> tuple[dict[str, Any], list[str], bool]:
        key = asyncio.run(_migrate_and_make_key(database.server_url()))
        env = {"ORBIT_DATABASE_URL": database.server_url(), "ORBIT_LOG_LEVEL": "warning",
               "ORBIT_LEASE_MS": str(LEASE_MS), "ORBIT_HEARTBEAT_MS": str(HEARTBEAT_MS),
               "ORBIT_HANDSHAKE_TIMEOUT_MS": str(LEASE_MS)}  # fmt: skip
        servers = [ServerTarget(f"s{n + 1}", free_port(), env) for n in range(self.n_servers)]
        urls = [s.url for s in servers]
        worker_env = {"ORBIT_API_KEY": key, "PYTHONPATH": str(ROOT), "CHAOS_RECORDS": str(records)}
        workers = [
            WorkerTarget(f"w{n + 1}", urls[n % len(urls) :] + urls[: n % len(urls)], worker_env, 4)
            for n in range(self.n_workers)
        ]
        self.topology = Topology(servers, workers, database.targets(urls))
        rng = random.Random(self.seed)
        schedule = plan(rng, seconds=self.profile.load_s, faults=self.profile.faults,
                        lease_s=LEASE_MS / 1000)  # fmt: skip
        injector = Injector(
            self.topology, schedule, rng, LEASE_MS / 1000, self.before, self.recover
        )
        load = Load(urls, key, self.profile.rate, self.profile.clients, self.seed)
        try:
            for server in servers:
                server.start()
            _configure_queues(urls[0], key)
            for worker in workers:
                worker.start()
            _wait_for_workers(urls[0], key, len(workers))
            self.began = time.time()
            load.start()
            injector.start()
            time.sleep(self.profile.load_s)  # the run's length
            injector.finish()
            load.stop()
            load_ended = time.time()
            settled = asyncio.run(_settle(self.read_url(), self.profile.settle_s))
            settle_s = time.time() - load_ended
        finally:
            self.topology.close()
        facts = asyncio.run(_read(self.read_url()))
        checks = check_all(load.submits, read_records(records), facts, self.windows)
        if injector.errors:
            checks.append(Check("every fault injected and recovered", False, {},
                                injector.errors))  # fmt: skip
        passed = all(c.passed for c in checks)
        document = self._document(load, injector.faults, checks, settled, settle_s, passed)
        return document, _markdown(document), passed

    def _document(
        self, load: Load, faults: list[Fault], checks: list[Check], settled: bool,
        settle_s: float, passed: bool,
    ) -> dict[str, Any]:  # fmt: skip
        outcomes: dict[str, int] = {}
        for s in load.submits:
            outcomes[s.outcome] = outcomes.get(s.outcome, 0) + 1
        return {
            "profile": asdict(self.profile),
            "seed": self.seed,
            "topology": {
                "servers": self.n_servers,
                "workers": self.n_workers,
                "worker capacity": 4,
                "database": self.topology_name,
                "databases": database_nodes(self.topology_name),
                "lease_ms": LEASE_MS,
                "heartbeat_ms": HEARTBEAT_MS,
            },
            "load": {
                "submits": len(load.submits),
                "outcomes": outcomes,
                "sends": sum(s.sends for s in load.submits),
                "ambiguous answers": sum(s.ambiguous for s in load.submits),
                "by kind": {k: sum(1 for s in load.submits if s.kind == k) for k, _, _ in MIX},
            },
            "faults": [
                {
                    **asdict(f),
                    "at_s": round(f.began - self.began, 2),
                    "down_s": round(f.ended - f.began, 2),
                }
                for f in faults
            ],
            "recovery": asdict(self.recovery),
            "settled": settled,
            "settle_s": round(settle_s, 1),
            "checks": [asdict(c) for c in checks],
            "verdict": "pass" if passed else "fail",
        }


def _configure_queues(url: str, key: str) -> None:
    with httpx2.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as http:
        for name, body in (("chaos", {"key_concurrency": 1}),
                           ("chaos-limited", {"concurrency_limit": 2})):  # fmt: skip
            http.put(f"/v1/queues/{name}", json=body).raise_for_status()


def _wait_for_workers(url: str, key: str, count: int) -> None:
    deadline = time.monotonic() + 60
    with httpx2.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as http:
        while time.monotonic() < deadline:
            queues = http.get("/v1/queues").json()["items"]
            if any(q["name"] == "chaos" and q["workers"] >= count for q in queues):
                return
            time.sleep(0.1)  # the workers connect on their own
    raise TimeoutError(f"{count} workers did not connect within 60 s")


def _elsewhere(fault: Fault, urls: list[str], away: str) -> dict[str, Any]:
    """From the fault on the node ``away`` to every server ready on another node."""
    ready_at = ready_elsewhere(urls, away)
    if len(ready_at) < len(urls):
        return {"ready_elsewhere_s": None}
    return {"ready_elsewhere_s": round(max(ready_at.values()) - fault.began, 2)}


async def _held(url: str, column: str, value: str) -> dict[str, tuple[int, str]]:
    conn = await asyncmy.connect(**{**_connect_args(url), "autocommit": True})
    try:
        async with conn.cursor() as cur:
            await cur.execute(
                f"SELECT id, lease_epoch, session_id FROM tasks WHERE {column} = %s"
                " AND state IN ('leased', 'running')",
                (value,),
            )
            return {row[0]: (int(row[1]), row[2]) for row in await cur.fetchall()}
    finally:
        conn.close()


async def _released(url: str, fault: Fault, held: dict[str, tuple[int, str]]) -> dict[str, Any]:
    """From the fault to every task its target held being re-leased, continued through
    another session (a worker that reconnected elsewhere with it), given back to its queue
    or ended (in its final state, or needs_review); each task's time, by the way it went."""
    waiting = dict(held)
    done_at = time.time()
    how: dict[str, list[float]] = {}
    conn = await asyncmy.connect(**{**_connect_args(url), "autocommit": True})
    try:
        deadline = time.monotonic() + 60
        async with conn.cursor() as cur:
            while waiting and time.monotonic() < deadline:
                marks = ",".join(["%s"] * len(waiting))
                await cur.execute(
                    f"SELECT id, lease_epoch, session_id, state FROM tasks WHERE id IN ({marks})",
                    tuple(waiting),
                )
                now = time.time()
                for task_id, epoch, session, state in await cur.fetchall():
                    if state in ("pending", "scheduled"):
                        way = "back in the queue"
                    elif state not in ("leased", "running"):
                        way = state
                    elif int(epoch) != waiting[task_id][0]:
                        way = "re-leased"
                    elif session != waiting[task_id][1]:
                        way = "continued elsewhere"
                    else:
                        continue
                    how.setdefault(way, []).append(now)
                    del waiting[task_id]
                done_at = now
                if waiting:
                    await asyncio.sleep(0.1)  # polling the database: no event to wait on
    finally:
        conn.close()
    since = fault.began or done_at  # read just before the signal, while this thread watched

    def took(at: float) -> float:
        return round(max(0.0, at - since), 2)

    return {"tasks held": len(held), "still held": len(waiting),
            "released_s": took(done_at) if held else None,
            **{way: [took(t) for t in times] for way, times in sorted(how.items())}}  # fmt: skip


async def _settle(url: str, bound_s: float) -> bool:
    """Wait until no task is scheduled, pending, leased or running, or ``bound_s`` passes."""
    conn = await asyncmy.connect(**{**_connect_args(url), "autocommit": True})
    try:
        deadline = time.monotonic() + bound_s
        async with conn.cursor() as cur:
            while time.monotonic() < deadline:
                await cur.execute(
                    "SELECT COUNT(*) FROM tasks WHERE state IN"
                    " ('scheduled', 'pending', 'leased', 'running')"
                )
                row = await cur.fetchone()
                if row is not None and int(row[0]) == 0:
                    return True
                await asyncio.sleep(0.2)
    finally:
        conn.close()
    return False


async def _read(url: str) -> Any:
    conn = await asyncmy.connect(**{**_connect_args(url), "autocommit": True})
    try:
        async with conn.cursor() as cur:
            return await read_facts(cur, TENANT, ENVIRONMENT)
    finally:
        conn.close()


def _markdown(doc: dict[str, Any]) -> list[str]:
    p, t, load = doc["profile"], doc["topology"], doc["load"]
    lines = [
        f"**Verdict: {doc['verdict'].upper()}** — profile `{p['name']}`, seed {doc['seed']}.",
        "",
        f"{t['servers']} `orbit server` processes and {t['workers']} SDK worker processes "
        f"(capacity {t['worker capacity']} each) on {DESCRIBED[t['database']]}; "
        f"lease {t['lease_ms']} ms, "
        f"heartbeat {t['heartbeat_ms']} ms. Load: {p['rate']:g} tasks/s for {p['load_s']:g} s "
        f"from {p['clients']} client threads: {load['submits']:,} submits "
        f"({', '.join(f'{k} {v}' for k, v in load['by kind'].items())}), {load['sends']:,} sends, "
        f"{load['ambiguous answers']:,} ambiguous answers re-sent; outcomes "
        f"{', '.join(f'{k} {v}' for k, v in load['outcomes'].items())}. Settled "
        f"{'in' if doc['settled'] else 'NOT within'} {doc['settle_s']:g} s after the load.",
        "",
        "## Checks",
        "",
        "| check | result | figures |",
        "| --- | --- | --- |",
    ]
    for c in doc["checks"]:
        figures = "; ".join(f"{k}: {v}" for k, v in c["figures"].items())
        lines.append(f"| {c['name']} | {'pass' if c['passed'] else '**FAIL**'} | {figures} |")
    failed = [c for c in doc["checks"] if c["violations"]]
    for c in failed:
        lines += ["", f"Violations of *{c['name']}* (first {len(c['violations'])}):", ""]
        lines += [f"- {v}" for v in c["violations"]]
    lines += [
        "",
        "## Faults",
        "",
        "| at s | fault | target | held s | past the lease | recovery |",
        "| ---: | --- | --- | ---: | --- | --- |",
    ]
    for f in doc["faults"]:
        action = "kill -9" if f["action"] == "kill" else "SIGSTOP"
        recovery = ", ".join(f"{k} {v}" for k, v in f["recovery"].items() if k != "fault")
        lines.append(
            f"| {f['at_s']} | {action} {f['kind']} | {f['target']} | {f['held_s']} | "
            f"{'yes' if f['past_lease'] else 'no'} | {recovery or '—'} |"
        )
    rec = doc["recovery"]
    released = [r["released_s"] for r in rec["released"] if r["tasks held"]]
    ready = [r["ready_s"] for r in rec["database_ready"] if r.get("ready_s") is not None]
    moved = [r["ready_elsewhere_s"] for r in rec["database_ready"] if "ready_elsewhere_s" in r]
    moved_in = sorted(m for m in moved if m is not None)
    lines += [
        "",
        "## Recovery",
        "",
        "- server or worker killed (or stopped past the lease) → every task it held re-leased, "
        "continued through another session or finished: "
        + (f"max {max(released)} s over {len(released)} faults" if released else "—"),
        "- database restarted (or continued) → every server ready again: "
        + (f"max {max(ready)} s over {len(ready)} outages" if ready else "—"),
    ]
    if moved:
        lines.append(
            "- database node Orbit wrote through killed or stopped → every server ready on "
            "another node: "
            + (f"median {statistics.median(moved_in)} s, max {max(moved_in)} s over "
               f"{len(moved_in)} faults" if moved_in else "—")
            + (f"; {len(moved) - len(moved_in)} NOT within 60 s" if len(moved_in) < len(moved)
               else "")
        )  # fmt: skip
    return lines


def run_chaos(
    *, profile: str, seed: int, servers: int, workers: int, out: Path, allow_tmpfs: bool,
    topology: str = "single",
) -> int:  # fmt: skip
    if topology not in TOPOLOGIES:
        raise ValueError(f"unknown topology {topology!r}: one of {', '.join(TOPOLOGIES)}")
    run = Run(PROFILES[profile], seed, servers, workers, topology)
    code = run.execute(out, allow_tmpfs)
    print(json.dumps({"chaos": {"profile": profile, "topology": topology, "seed": seed,
                                "exit": code}}), flush=True)  # fmt: skip
    return code
