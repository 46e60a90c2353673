"""Claim + start + complete through Pulse's worker-side service, with small and huge backlogs.

The figure that matters is the cost per claimed task as the backlog grows: the claim reads only
``task_ready`` in index order, so 1,000,000 pending tasks should cost about what 10,000 do.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import report
from bench.databases import Databases
from orbit_server.clock import SystemClock
from orbit_server.ids import new_id
from orbit_server.pulse.model import TaskSpec, new_task
from orbit_server.pulse.worker import Session, Want, WorkerService
from orbit_server.scope import Scope
from orbit_server.store import Database, Tx, open_database
from orbit_server.store import claim_range as ready_store
from orbit_server.store import queues as queue_store
from orbit_server.store import tasks as task_store
from orbit_server.store.migrate import migrate

SCOPE = Scope("bench", "bench")
SEED_CHUNK = 5000


@dataclass
class ClaimResult:
    backlog: int
    measured: int
    seed_s: float
    claim_s: float
    start_complete_s: float
    claim_us_per_task: float
    start_complete_us_per_task: float
    tasks_per_s: float


async def seed(db: Database, count: int) -> float:
    """Insert ``count`` pending tasks quickly (multi-row inserts, chunks per transaction)."""
    clock = SystemClock()
    started = time.perf_counter()
    spec = TaskSpec(queue="bench", type="noop", params={"n": 1})
    done = 0
    while done < count:
        size = min(SEED_CHUNK, count - done)
        now = clock.now()
        tasks = [
            new_task(spec, task_id=new_id(), scope=SCOPE, now=now, default_timeout_ms=300_000)
            for _ in range(size)
        ]

        async def unit(tx: Tx, tasks: list[Any] = tasks, now: datetime = now) -> None:
            await queue_store.queue_ensure(tx, SCOPE, "bench", now)
            await tx.execute_many("task_insert", [task_store.task_insert_params(t) for t in tasks])
            await tx.execute_many(
                "task_ready_insert", [ready_store.task_ready_params(t) for t in tasks]
            )
            await queue_store.queue_add_counts(tx, SCOPE, "bench", pending=len(tasks), now=now)

        await db.run(unit, timeout_s=600)
        done += size
    return time.perf_counter() - started


async def measure_claims(db: Database, measure: int, batch: int) -> tuple[float, float, int]:
    clock = SystemClock()
    workers = WorkerService(db, clock, lease_ms=60_000)
    session = Session("bench-session", "bench-node", "bench-worker")
    claim_s = work_s = 0.0
    claimed = 0
    while claimed < measure:
        t0 = time.perf_counter()
        leases = await workers.claim(
            SCOPE, session, [Want("bench", "noop", batch)], limit=min(batch, measure - claimed)
        )
        t1 = time.perf_counter()
        if not leases:
            break
        for lease in leases:
            await workers.start(lease.ref)
            await workers.complete(lease.ref, None)
        claim_s += t1 - t0
        work_s += time.perf_counter() - t1
        claimed += len(leases)
    return claim_s, work_s, claimed


async def run_one(url: str, backlog: int, measure: int, batch: int) -> ClaimResult:
    db = open_database(url, pool_max=4)
    await db.connect()
    try:
        await migrate(db)
        seed_s = await seed(db, backlog + measure)
        claim_s, work_s, claimed = await measure_claims(db, measure, batch)
    finally:
        await db.close()
    return ClaimResult(
        backlog=backlog,
        measured=claimed,
        seed_s=round(seed_s, 2),
        claim_s=round(claim_s, 3),
        start_complete_s=round(work_s, 3),
        claim_us_per_task=round(claim_s / max(claimed, 1) * 1e6, 1),
        start_complete_us_per_task=round(work_s / max(claimed, 1) * 1e6, 1),
        tasks_per_s=round(claimed / max(claim_s + work_s, 1e-9), 1),
    )


def run_claim_benchmark(
    backlogs: list[int], *, measure: int, batch: int, url: str | None, out: Path,
    allow_tmpfs: bool = False,
) -> int:  # fmt: skip
    results: list[ClaimResult] = []
    with Databases(url, allow_tmpfs=allow_tmpfs) as dbs:
        facts = dbs.facts
        for backlog in backlogs:
            # An empty database per run, on the private server or beside the given one.
            run_url = dbs.fresh(f"bench_{backlog}")
            result = asyncio.run(run_one(run_url, backlog, measure, batch))
            results.append(result)
            print(json.dumps(asdict(result)), flush=True)
            dbs.drop(f"bench_{backlog}")
    path = write_report(out, results, facts, measure=measure, batch=batch)
    print(f"report: {path}")
    return 0


def write_report(
    out: Path, results: list[ClaimResult], facts: dict[str, Any], *, measure: int, batch: int
) -> Path:
    body = [
        f"Claims of {batch}; start and complete one transaction each.",
        "",
        "| backlog | measured | claim µs/task | start+complete µs/task | tasks/s |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    body += [
        f"| {r.backlog:,} | {r.measured:,} | {r.claim_us_per_task} | "
        f"{r.start_complete_us_per_task} | {r.tasks_per_s} |"
        for r in results
    ]
    if len(results) >= 2 and results[0].claim_us_per_task:
        ratio = results[-1].claim_us_per_task / results[0].claim_us_per_task
        body += ["", f"Claim cost ratio, largest / smallest backlog: {ratio:.2f}×"]
    data = {"measure": measure, "batch": batch, "results": [asdict(r) for r in results]}
    return report.write(out, "claim", "Claim benchmark", facts, data, body)
