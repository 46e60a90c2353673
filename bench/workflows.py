"""Workflow throughput and step-to-step latency: instances of a five-step definition (each
step a no-op task on the ``bench`` queue) started over HTTP while SDK worker processes are
connected, through one ``orbit server`` on MariaDB with durable settings.

Figures, read from the database after the run:

- **steps/s**: task steps finished ÷ the time from the first start's request to the last
  instance's finish;
- **step-to-step**: for each pair of consecutive steps of an instance, from the commit of the
  earlier step's task result (``tasks.finished_at``) to the start of the next step's task on a
  worker (its first attempt's ``started_at``); and, inside that, the **advance** part: to the
  creation of the next step's task (the result event consumed, the instance advanced).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import asyncmy
import httpx2

import orbit_sdk
from bench.baseline import _connect_args
from bench.throughput import Stack, _wait

STEPS = 5
IN_FLIGHT = 32  # start requests at once


@dataclass
class WorkflowsResult:
    instances: int
    steps: int
    capacity: int
    worker_processes: int
    server_processes: int
    # the burst: every instance started at once
    seconds: float
    starts_seconds: float
    steps_per_s: float
    instances_per_s: float
    burst_hop_p50_ms: float
    burst_hop_p99_ms: float
    burst_advance_p50_ms: float
    burst_advance_p99_ms: float
    largest_advancement_rows: int
    # paced: instances started one by one below capacity
    paced_instances: int
    paced_per_s: float
    hop_p50_ms: float
    hop_p95_ms: float
    hop_p99_ms: float
    advance_p50_ms: float
    advance_p95_ms: float
    advance_p99_ms: float


def definition() -> orbit_sdk.Workflow:
    wf = orbit_sdk.Workflow("bench-five", version="1")
    for n in range(1, STEPS + 1):
        wf.task(f"s{n}", queue="bench", type="noop", params=f"{{'step': {n}}}")
    return wf


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2) if ordered else 0.0


async def _start_all(url: str, key: str, instances: int) -> set[str]:
    """Start ``instances`` as fast as ``IN_FLIGHT`` concurrent requests go."""
    ids: set[str] = set()
    async with orbit_sdk.AsyncClient(url, key, timeout=120) as client:
        queue: asyncio.Queue[int] = asyncio.Queue()
        for n in range(instances):
            queue.put_nowait(n)

        async def lane() -> None:
            while not queue.empty():
                n = queue.get_nowait()
                ids.add((await client.start_workflow("bench-five", {"n": n})).id)

        await asyncio.gather(*(lane() for _ in range(IN_FLIGHT)))
    return ids


async def _start_paced(url: str, key: str, instances: int, per_s: float) -> set[str]:
    """Start one instance every ``1 / per_s`` seconds (each request on its own)."""
    ids: set[str] = set()
    async with orbit_sdk.AsyncClient(url, key, timeout=120) as client:

        async def one(n: int) -> None:
            await asyncio.sleep(n / per_s)
            ids.add((await client.start_workflow("bench-five", {"n": n})).id)

        await asyncio.gather(*(one(n) for n in range(instances)))
    return ids


async def _finished(url: str, instances: int, seconds: float) -> None:  # all so far
    """Wait until no instance runs any more (one index read every 20 ms), then check that
    every one succeeded."""
    conn = await asyncmy.connect(**{**_connect_args(url), "autocommit": True})
    try:
        deadline = time.monotonic() + seconds
        async with conn.cursor() as cur:
            while time.monotonic() < deadline:
                await cur.execute(
                    "SELECT id FROM workflows WHERE tenant = 'bench' AND environment = 'bench' "
                    "AND state = 'running' LIMIT 1"
                )
                if await cur.fetchone() is None:
                    await cur.execute(
                        "SELECT COUNT(*) FROM workflows WHERE tenant = 'bench' "
                        "AND environment = 'bench' AND state = 'succeeded'"
                    )
                    row = await cur.fetchone()
                    if row is None or int(row[0]) != instances:
                        raise RuntimeError(f"{row} of {instances} instances succeeded")
                    return
                await asyncio.sleep(0.02)
    finally:
        conn.close()
    raise TimeoutError(f"not every instance finished within {seconds} s")


async def _hops(url: str, ids: set[str]) -> tuple[list[float], list[float]]:
    """Step-to-step and advance times (ms) of every consecutive pair of the instances."""
    conn = await asyncmy.connect(**{**_connect_args(url), "autocommit": True})
    try:
        async with conn.cursor() as cur:
            await cur.execute(
                "SELECT t.owner_id, t.owner_step, t.created_at, t.finished_at, a.started_at "
                "FROM tasks t JOIN task_attempts a ON a.task_id = t.id AND a.number = 1 "
                "WHERE t.owner_kind = 'workflow'"
            )
            rows = [r for r in await cur.fetchall() if r[0] in ids]
    finally:
        conn.close()
    by_step: dict[tuple[str, str], tuple[Any, Any, Any]] = {
        (r[0], r[1]): (r[2], r[3], r[4]) for r in rows
    }
    hops: list[float] = []
    advances: list[float] = []
    for (workflow, step), (created, _finished_at, started) in by_step.items():
        n = int(step[1:])
        if n == 1:
            continue
        before = by_step.get((workflow, f"s{n - 1}"))
        if before is None or before[1] is None:
            continue
        hops.append((started - before[1]).total_seconds() * 1000)
        advances.append((created - before[1]).total_seconds() * 1000)
    return hops, advances


def _largest_advancement(metrics: str) -> int:
    count = 0
    bound = 0
    for line in metrics.splitlines():
        if line.startswith("orbit_workflow_advancement_writes_count"):
            count = int(float(line.split()[-1]))
    for line in metrics.splitlines():
        if line.startswith("orbit_workflow_advancement_writes_bucket"):
            le = line.split('le="')[1].split('"')[0]
            if le != "+Inf" and int(float(line.split()[-1])) == count:
                return int(float(le))
            bound = -1
    return bound


def run_workflows(
    url: str,
    *,
    instances: int,
    capacity: int,
    processes: int,
    server_processes: int = 1,
    paced: int = 200,
    paced_per_s: float = 20.0,
) -> WorkflowsResult:
    """The paced phase (latency with idle workers), then the burst (throughput), on one
    server and database."""
    stack = Stack(url, server_processes)
    try:
        with orbit_sdk.Client(stack.url, stack.key, timeout=120) as client:
            client.publish_workflow(definition())
            client.update_queue("bench", paused=False)  # the queue exists: workers count
            stack.start_workers(processes, capacity)
            _wait(client, "workers", processes, 60)
            paced_ids = asyncio.run(_start_paced(stack.url, stack.key, paced, paced_per_s))
            asyncio.run(_finished(url, paced, 600))
            began = time.perf_counter()
            burst_ids = asyncio.run(_start_all(stack.url, stack.key, instances))
            starts_seconds = time.perf_counter() - began
            asyncio.run(_finished(url, paced + instances, 1800))
            seconds = time.perf_counter() - began
            metrics = httpx2.get(f"{stack.url}/metrics", timeout=30).text
        hops, advances = asyncio.run(_hops(url, paced_ids))
        burst_hops, burst_advances = asyncio.run(_hops(url, burst_ids))
    except TimeoutError as exc:
        logs = "".join(w.stderr[-800:] for w in stack.workers) + stack.server.stderr[-1500:]
        raise TimeoutError(f"{exc}; the processes said:\n{logs}") from None
    finally:
        stack.close()
    steps = instances * STEPS
    return WorkflowsResult(
        instances=instances, steps=steps, capacity=capacity, worker_processes=processes,
        server_processes=server_processes, seconds=round(seconds, 3),
        starts_seconds=round(starts_seconds, 3), steps_per_s=round(steps / seconds, 1),
        instances_per_s=round(instances / seconds, 1),
        burst_hop_p50_ms=_pct(burst_hops, 0.5), burst_hop_p99_ms=_pct(burst_hops, 0.99),
        burst_advance_p50_ms=_pct(burst_advances, 0.5),
        burst_advance_p99_ms=_pct(burst_advances, 0.99),
        largest_advancement_rows=_largest_advancement(metrics),
        paced_instances=paced, paced_per_s=paced_per_s,
        hop_p50_ms=_pct(hops, 0.5), hop_p95_ms=_pct(hops, 0.95), hop_p99_ms=_pct(hops, 0.99),
        advance_p50_ms=_pct(advances, 0.5), advance_p95_ms=_pct(advances, 0.95),
        advance_p99_ms=_pct(advances, 0.99),
    )  # fmt: skip
