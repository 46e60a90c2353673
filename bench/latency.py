"""Latency with idle workers: tasks submitted one by one over HTTP, each waited for before the
next; submit → handler start and submit → result visible to the submitter (a long poll), p50
and p99. *Same node*: the worker is connected to the server that takes the submit; *cross
node*: two servers on one database, submit on the first, the worker on the second (the second
finds the work through its indexed poll)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import orbit_sdk
from bench.throughput import Stack, _wait
from tests.support.processes import OrbitProcess


@dataclass
class LatencyResult:
    placement: str
    tasks: int
    start_p50_ms: float
    start_p99_ms: float
    result_p50_ms: float
    result_p99_ms: float


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return round(ordered[index], 2)


def run_latency(url: str, *, tasks: int, cross_node: bool) -> LatencyResult:
    stack = Stack(url)
    other: OrbitProcess | None = None
    try:
        worker_url = stack.url
        if cross_node:
            other = OrbitProcess(["server", "--port", "0", "--host", "127.0.0.1"], env=stack.env)
            worker_url = other.wait_for("ORBIT_URL")["ORBIT_URL"]
        with orbit_sdk.Client(stack.url, stack.key, timeout=60) as client:
            client.update_queue("bench", paused=False)
            stack.start_workers(1, 8, url=worker_url)
            _wait(client, "workers", 1, 60)
            starts, results = [], []
            for _ in range(tasks):
                sent = time.time()
                task = client.submit("bench", "stamp")
                done = client.wait_for_task(task.id, timeout=30)
                seen = time.time()
                assert done.state == "succeeded" and isinstance(done.result, dict)
                starts.append((float(done.result["started"]) - sent) * 1000)
                results.append((seen - sent) * 1000)
    finally:
        stack.close()
        if other is not None:
            other.stop(timeout=30)
    return LatencyResult(
        "cross node" if cross_node else "same node",
        tasks,
        _percentile(starts, 0.5),
        _percentile(starts, 0.99),
        _percentile(results, 0.5),
        _percentile(results, 0.99),
    )
