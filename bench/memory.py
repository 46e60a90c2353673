"""Server memory under a steady load: one ``orbit server`` and SDK worker processes on MariaDB,
no-op tasks submitted over HTTP at a fixed rate below capacity for ``--minutes``, and the
server's resident memory (``VmRSS``) sampled throughout. After a warm-up, the samples must stay
within ±20 % of the first one taken after it."""

from __future__ import annotations

import time
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
    url: str, *, minutes: float, rate: int, capacity: int, processes: int, sample_s: float = 10.0
) -> MemoryResult:
    stack = Stack(url)
    pid = stack.server.proc.pid
    warmup = min(60.0, minutes * 60 / 5)
    samples: list[tuple[float, float]] = []
    sent = 0
    try:
        with orbit_sdk.Client(stack.url, stack.key, timeout=60) as client:
            client.update_queue("bench", paused=False)
            stack.start_workers(processes, capacity)
            _wait(client, "workers", processes, 60)
            batch = max(1, rate // 10)  # ten batches a second
            began = time.monotonic()
            next_sample = began
            while (elapsed := time.monotonic() - began) < minutes * 60:
                client.submit_many([_task(sent + i, False) for i in range(batch)])
                sent += batch
                if time.monotonic() >= next_sample:
                    samples.append((round(elapsed, 1), rss_mib(pid)))
                    next_sample += sample_s
                early = began + sent / rate - time.monotonic()
                if early > 0:
                    time.sleep(early)  # pacing the load generator, not synchronising a test
            samples.append((round(time.monotonic() - began, 1), rss_mib(pid)))
            _wait(client, "succeeded", sent, 300)
            [queue] = [q for q in client.list_queues() if q.name == "bench"]
            succeeded = queue.counts.get("succeeded", 0)
    finally:
        stack.close()
    after = [mib for at, mib in samples if at >= warmup] or [samples[-1][1]]
    baseline = after[0]
    return MemoryResult(
        minutes=minutes, rate_per_s=rate, tasks=sent, succeeded=succeeded, warmup_s=warmup,
        baseline_mib=baseline, max_mib=max(after), last_mib=after[-1],
        drift=round((max(after) - baseline) / baseline, 3), samples=samples,
    )  # fmt: skip
