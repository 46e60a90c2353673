"""The peer workload, Orbit's side: what a peer queue's benchmark does, on one fresh
``orbit server`` with SDK worker processes.

With the queue paused, the first ``single`` tasks are submitted one request each
(``POST /v1/tasks``, one after another over one keep-alive connection), the rest in batches
(``POST /v1/tasks:batch``); then the workers connect, the queue is resumed and the drain is
timed from the first handler start (the earliest attempt's ``started_at``) to the last task
finished (the latest ``finished_at``). The server process's CPU time (and that of any process
it forked) is read before and after each phase."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

import asyncmy

import orbit_sdk
from bench.baseline import _connect_args
from bench.throughput import Stack, _drained, _wait

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass
class PeerFigures:
    """One row of the peer workload's table: the raw database's or Orbit's at one capacity.
    Rates are tasks per second; ``None`` where a figure does not apply (no batched tasks; the
    raw row has no Orbit server whose CPU could be read)."""

    system: str  # "raw" or "orbit"
    capacity: int | None
    tasks: int
    single: int
    batch: int
    single_s: float
    batch_s: float
    drain_s: float
    single_per_s: float
    batch_per_s: float | None
    drain_per_s: float
    total_per_s: float
    cpu_us_per_single: float | None = None
    cpu_us_per_batched: float | None = None
    cpu_us_per_drained: float | None = None


def figures(
    system: str, capacity: int | None, *, tasks: int, single: int, batch: int,
    single_s: float, batch_s: float, drain_s: float,
    cpu_s: tuple[float, float, float] | None = None,
) -> PeerFigures:  # fmt: skip
    """The row of one run from its phases' times (and the server's CPU seconds per phase:
    single submits, batched submits, drain)."""
    batched = tasks - single

    def per_task(seconds: float, count: int) -> float | None:
        return round(seconds / count * 1e6, 1) if count else None

    return PeerFigures(
        system=system, capacity=capacity, tasks=tasks, single=single, batch=batch,
        single_s=round(single_s, 3), batch_s=round(batch_s, 3), drain_s=round(drain_s, 3),
        single_per_s=round(single / single_s, 1) if single else 0.0,
        batch_per_s=round(batched / batch_s, 1) if batched else None,
        drain_per_s=round(tasks / drain_s, 1),
        total_per_s=round(tasks / (single_s + batch_s + drain_s), 1),
        cpu_us_per_single=per_task(cpu_s[0], single) if cpu_s else None,
        cpu_us_per_batched=per_task(cpu_s[1], batched) if cpu_s else None,
        cpu_us_per_drained=per_task(cpu_s[2], tasks) if cpu_s else None,
    )  # fmt: skip


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (which may hold spaces):
    [0] is the state, [1] the parent, [11:15] utime, stime, cutime, cstime."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def process_tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and every live process below it, with the
    children each has reaped (``cutime``, ``cstime``): the sum only grows, even when a forked
    server process ends between two readings."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (fields := _stat_fields(int(entry.name))) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        one = todo.pop()
        fields = _stat_fields(one)
        if fields is None:
            continue
        total += sum(int(v) for v in fields[11:15])
        todo += children.get(one, [])
    return total / _TICKS_PER_S


async def drain_span_s(url: str) -> float:
    """From the first handler start to the last task finished, as the database recorded them."""
    conn = await asyncmy.connect(**{**_connect_args(url), "autocommit": True})
    try:
        async with conn.cursor() as cur:
            await cur.execute(
                "SELECT TIMESTAMPDIFF(MICROSECOND, (SELECT MIN(started_at) FROM task_attempts),"
                " (SELECT MAX(finished_at) FROM tasks))"
            )
            row = await cur.fetchone()
    finally:
        conn.close()
    if row is None or row[0] is None:
        raise RuntimeError("no task was started and finished: nothing to time")
    return int(row[0]) / 1e6


def run_peer_orbit(
    url: str, *, tasks: int, single: int, batch: int, capacity: int, processes: int,
    server_processes: int = 1,
) -> PeerFigures:  # fmt: skip
    """The peer workload through one fresh ``orbit server`` on the (empty) database ``url``."""
    stack = Stack(url, server_processes)
    pid = stack.server.proc.pid
    task = {"queue": "bench", "type": "noop"}
    try:
        with orbit_sdk.Client(stack.url, stack.key, timeout=120) as client:
            client.update_queue("bench", paused=True)
            cpu = [process_tree_cpu_s(pid)]
            started = time.perf_counter()
            for _ in range(single):
                client.submit("bench", "noop")
            single_s = time.perf_counter() - started
            cpu.append(process_tree_cpu_s(pid))
            started, sent = time.perf_counter(), single
            while sent < tasks:
                size = min(batch, tasks - sent)
                client.submit_many([task] * size)
                sent += size
            batch_s = time.perf_counter() - started
            cpu.append(process_tree_cpu_s(pid))
            stack.start_workers(processes, capacity)
            _wait(client, "workers", processes, 60)
            cpu.append(process_tree_cpu_s(pid))
            client.update_queue("bench", paused=False)
            asyncio.run(_drained(url, 1800))
            cpu.append(process_tree_cpu_s(pid))
            _wait(client, "succeeded", tasks, 10)  # every task succeeded, not just left
        drain_s = asyncio.run(drain_span_s(url))
    except TimeoutError as exc:
        logs = "".join(w.stderr[-800:] for w in stack.workers) + stack.server.stderr[-1500:]
        raise TimeoutError(f"{exc}; the processes said:\n{logs}") from None
    finally:
        stack.close()
    phases = (cpu[1] - cpu[0], cpu[2] - cpu[1], cpu[4] - cpu[3])
    return figures(
        "orbit", capacity, tasks=tasks, single=single, batch=batch, single_s=single_s,
        batch_s=batch_s, drain_s=drain_s, cpu_s=phases,
    )  # fmt: skip
