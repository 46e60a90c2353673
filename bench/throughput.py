"""End-to-end throughput: no-op tasks submitted over HTTP in batches and processed by SDK
worker processes (``orbit-worker``) through one ``orbit server``, on MariaDB with durable
settings — beside the raw-database baseline of the same run.

- **burn-down**: the queue is paused, every task is submitted, the workers connect, then the
  queue is resumed and the clock runs until the last task has succeeded;
- **steady**: the workers are connected first; the clock runs from the first submit (batches
  sent one after another) until the last task has succeeded.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import asyncmy

import orbit_sdk
from bench.baseline import _connect_args
from orbit_server.audit import Actor, AuditWriter
from orbit_server.clock import SystemClock
from orbit_server.governance.keys import Role
from orbit_server.governance.service import KeyService
from orbit_server.scope import Scope
from orbit_server.store import open_database
from orbit_server.store.migrate import migrate
from tests.support.processes import OrbitProcess

ROOT = Path(__file__).resolve().parents[1]
SUBMIT_BATCH = 1000


@dataclass
class ThroughputResult:
    mode: str
    capacity: int
    worker_processes: int
    server_processes: int
    features: bool
    tasks: int
    seconds: float
    tasks_per_s: float


class Stack:
    """One Orbit server and its database, with a key that may submit, operate and work."""

    def __init__(
        self, url: str, server_processes: int = 1, settings: dict[str, str] | None = None
    ) -> None:
        # The server sees no ORBIT_* setting of the caller's environment: ``settings`` are its
        # only other ones.
        self.env = {"ORBIT_DATABASE_URL": url, "ORBIT_LOG_LEVEL": "warning", **(settings or {})}
        self.key = asyncio.run(_migrate_and_make_key(url))
        self.server = OrbitProcess(
            ["server", "--port", "0", "--host", "127.0.0.1", "--processes", str(server_processes)],
            env=self.env,
        )
        self.url = self.server.wait_for("ORBIT_URL")["ORBIT_URL"]
        self.workers: list[OrbitProcess] = []

    def start_workers(self, processes: int, capacity: int, url: str | None = None) -> None:
        command = str(Path(sys.executable).parent / "orbit-worker")
        per_process = max(1, capacity // processes)
        env = {"ORBIT_URL": url or self.url, "ORBIT_API_KEY": self.key, "PYTHONPATH": str(ROOT)}
        for _ in range(processes):
            args = [command, "bench.noop_worker:worker", "--concurrency", str(per_process)]
            self.workers.append(OrbitProcess.command([*args, "--log-level", "warning"], env=env))

    def close(self) -> None:
        for proc in [*self.workers, self.server]:
            proc.stop(timeout=30)


async def _migrate_and_make_key(url: str) -> str:
    """What ``orbit migrate`` and ``orbit keys create`` would do (tenant and environment
    ``bench``; submitter, operator and worker), in this process: a process each would take
    longer than a smoke run's measurement."""
    db = open_database(url, pool_max=2)
    await db.connect()
    try:
        await migrate(db)
        clock = SystemClock()
        keys = KeyService(db, clock, AuditWriter(clock))
        roles = (Role.SUBMITTER, Role.OPERATOR, Role.WORKER)
        created = await keys.create(Scope("bench", "bench"), roles, actor=Actor("bench"))
        return created.token
    finally:
        await db.close()


def _wait(client: orbit_sdk.Client, check: str, target: int, timeout: float) -> None:
    """Poll the queue until ``check`` (a count or ``workers``) reaches ``target``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queues = [q for q in client.list_queues() if q.name == "bench"]
        if queues:
            value = queues[0].workers if check == "workers" else queues[0].counts.get(check, 0)
            if value >= target:
                return
        time.sleep(0.1)  # counting the queue's states costs the server a scan; not too often
    raise TimeoutError(f"the queue did not reach {check} = {target} within {timeout} s")


async def _drained(url: str, seconds: float) -> None:
    """Wait until the queue has nothing pending or active, reading its counter row (one
    primary-key read every 10 ms) — the API's counts group the queue's whole history, which
    would load the database the run measures."""
    conn = await asyncmy.connect(**{**_connect_args(url), "autocommit": True})
    try:
        deadline = time.monotonic() + seconds
        async with conn.cursor() as cur:
            while time.monotonic() < deadline:
                await cur.execute("SELECT pending + active FROM queues WHERE name = 'bench'")
                row = await cur.fetchone()
                if row is not None and int(row[0]) == 0:
                    return
                await asyncio.sleep(0.01)
    finally:
        conn.close()
    raise TimeoutError(f"the queue still had work after {seconds} s")


FEATURE_KEYS = 1000  # concurrency keys with --features
FAIRNESS_KEYS = 10


def _task(n: int, features: bool) -> dict[str, object]:
    if not features:
        return {"queue": "bench", "type": "noop"}
    return {"queue": "bench", "type": "noop", "concurrency_key": f"k{n % FEATURE_KEYS}",
            "fairness_key": f"f{n % FAIRNESS_KEYS}"}  # fmt: skip


def _submit(client: orbit_sdk.Client, count: int, features: bool = False) -> None:
    sent = 0
    while sent < count:
        size = min(SUBMIT_BATCH, count - sent)
        client.submit_many([_task(sent + i, features) for i in range(size)])
        sent += size


def run_throughput(
    url: str,
    *,
    mode: str,
    tasks: int,
    capacity: int,
    processes: int,
    server_processes: int = 1,
    features: bool = False,
) -> ThroughputResult:
    """With ``features``: per-key exclusion over 1,000 keys, fairness over 10 keys and a queue
    concurrency limit equal to the capacity, all on at once."""
    stack = Stack(url, server_processes)
    try:
        with orbit_sdk.Client(stack.url, stack.key, timeout=120) as client:
            if features:
                client.update_queue("bench", concurrency_limit=capacity)
            if mode == "burn-down":
                client.update_queue("bench", paused=True)
                _submit(client, tasks, features)
                stack.start_workers(processes, capacity)
                _wait(client, "workers", processes, 60)
                started = time.perf_counter()
                client.update_queue("bench", paused=False)
            else:
                client.update_queue("bench", paused=False)  # the queue exists: workers count
                stack.start_workers(processes, capacity)
                _wait(client, "workers", processes, 60)
                started = time.perf_counter()
                _submit(client, tasks, features)
            asyncio.run(_drained(url, 1800))
            seconds = time.perf_counter() - started
            _wait(client, "succeeded", tasks, 10)  # every task succeeded, not just left
    except TimeoutError as exc:
        logs = "".join(w.stderr[-800:] for w in stack.workers) + stack.server.stderr[-1500:]
        raise TimeoutError(f"{exc}; the processes said:\n{logs}") from None
    finally:
        stack.close()
    return ThroughputResult(
        mode, capacity, processes, server_processes, features, tasks, round(seconds, 3),
        round(tasks / seconds, 1),
    )  # fmt: skip
