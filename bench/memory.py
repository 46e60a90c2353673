"""Server memory under a steady load: one ``orbit server`` and SDK worker processes on MariaDB,
no-op tasks submitted over HTTP at a fixed rate below capacity for ``--minutes``, and the
server's resident memory (``VmRSS``) sampled throughout. After a warm-up, the samples must stay
within ±20 % of the first one taken after it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orbit_sdk
from bench.throughput import Stack, _task, _wait


@dataclass
class MemoryResult:
    minutes: float
    rate_per_s: int
    tasks: int
    succeeded: int
    warmup_s: float
    baseline_mib: float  # the first sample after the warm-up
    max_mib: float
    last_mib: float
    drift: float  # (max sample after the warm-up − baseline) / baseline
    samples: list[tuple[float, float]] = field(default_factory=list)  # (seconds, MiB)
    outages: list[float] = field(default_factory=list)  # when each began, seconds into the run
    outage_s: float = 0.0
    refused: int = 0  # submits answered with an error (during the outages)


def rss_mib(pid: int) -> float:
    """Resident memory of a process (and the children a multi-process server forks)."""
    total = 0.0
    for one in [pid, *_children(pid)]:
        try:
            status = Path(f"/proc/{one}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) / 1024
    return round(total, 1)


def _children(pid: int) -> list[int]:
    try:
        found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [int(c) for c in found]


def run_memory(
    url: str, *, minutes: float, rate: int, capacity: int, processes: int, sample_s: float = 10.0,
    outages: int = 0, outage_s: float = 8.0, outage: Callable[[float], None] | None = None,
) -> MemoryResult:  # fmt: skip
    """With ``outages``, the database is stopped that many times (``outage(outage_s)``),
    evenly over the run after the warm-up, while the load goes on: submits are refused
    meanwhile, and counted."""
    stack = Stack(url)
    pid = stack.server.proc.pid
    warmup = min(60.0, minutes * 60 / 5)
    samples: list[tuple[float, float]] = []
    began_outages: list[float] = []
    sent = refused = 0
    every = (minutes * 60 - warmup) / (outages + 1) if outages else 0.0
    done = threading.Event()

    def break_database(began: float) -> None:
        assert outage is not None
        for n in range(outages):
            if done.wait(max(0.0, began + warmup + every * (n + 1) - time.monotonic())):
                return
            began_outages.append(round(time.monotonic() - began, 1))
            outage(outage_s)

    try:
        with orbit_sdk.Client(stack.url, stack.key, timeout=60) as client:
            client.update_queue("bench", paused=False)
            stack.start_workers(processes, capacity)
            _wait(client, "workers", processes, 60)
            batch = max(1, rate // 10)  # ten batches a second
            began = time.monotonic()
            breaker = threading.Thread(target=break_database, args=(began,), daemon=True)
            if outages:
                breaker.start()
            next_sample = began
            while (elapsed := time.monotonic() - began) < minutes * 60:
                try:
                    client.submit_many([_task(sent + i, False) for i in range(batch)])
                    sent += batch
                except orbit_sdk.OrbitError:
                    refused += 1  # the database is down: the server refuses, nothing is lost
                if time.monotonic() >= next_sample:
                    samples.append((round(elapsed, 1), rss_mib(pid)))
                    next_sample += sample_s
                early = began + (sent + refused * batch) / rate - time.monotonic()
                if early > 0:
                    time.sleep(early)  # pacing the load generator, not synchronising a test
            done.set()
            if outages:
                breaker.join()
            samples.append((round(time.monotonic() - began, 1), rss_mib(pid)))
            _wait(client, "succeeded", sent, 300)
            [queue] = [q for q in client.list_queues() if q.name == "bench"]
            succeeded = queue.counts.get("succeeded", 0)
    finally:
        done.set()
        stack.close()
    after = [mib for at, mib in samples if at >= warmup] or [samples[-1][1]]
    baseline = after[0]
    return MemoryResult(
        minutes=minutes, rate_per_s=rate, tasks=sent, succeeded=succeeded, warmup_s=warmup,
        baseline_mib=baseline, max_mib=max(after), last_mib=after[-1],
        drift=round((max(after) - baseline) / baseline, 3), samples=samples,
        outages=began_outages, outage_s=outage_s if outages else 0.0, refused=refused,
    )  # fmt: skip
