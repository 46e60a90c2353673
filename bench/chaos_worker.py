"""The SDK worker of the chaos scenario (``orbit-worker bench.chaos_worker:worker``).

Every handler appends a ``start`` line when it begins and an ``end`` line when it is about to
return, to a file of its own process (``$CHAOS_RECORDS/worker-<pid>.jsonl``): the workers' own
records, which the checks read beside the database. Each line is one ``os.write`` on a file
opened with ``O_APPEND``, so a ``kill -9`` loses no line that was written and never leaves half
of one. Handlers hold their task for a while (``params.hold_ms``), so that a kill lands in the
middle of work and two holders of one concurrency key would be seen overlapping.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from orbit_sdk.worker import TaskContext, Worker

worker = Worker()
QUEUE = "chaos"
LIMITED_QUEUE = "chaos-limited"
_files: dict[int, int] = {}  # pid → the descriptor of its records


def _record(event: str, ctx: TaskContext) -> None:
    pid = os.getpid()
    if pid not in _files:
        folder = Path(os.environ.get("CHAOS_RECORDS", "."))
        path = folder / f"worker-{pid}.jsonl"
        _files[pid] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    params = ctx.params if isinstance(ctx.params, dict) else {}
    line = {
        "event": event,
        "task": ctx.task_id,
        "attempt": ctx.attempt,
        "queue": ctx.queue,
        "type": ctx.type,
        "key": params.get("key"),
        "concurrency_key": params.get("concurrency_key"),
        "pid": os.getpid(),
        "t": time.time(),
    }
    os.write(_files[pid], (json.dumps(line) + "\n").encode())


async def _hold(ctx: TaskContext) -> dict[str, Any]:
    _record("start", ctx)
    params = ctx.params if isinstance(ctx.params, dict) else {}
    await asyncio.sleep(int(params.get("hold_ms", 0)) / 1000)
    _record("end", ctx)
    return {"pid": os.getpid(), "attempt": ctx.attempt}


@worker.handler(queue=QUEUE, type="idempotent")
async def idempotent(ctx: TaskContext) -> dict[str, Any]:
    return await _hold(ctx)


@worker.handler(queue=QUEUE, type="unsafe", side_effect="unsafe")
async def unsafe(ctx: TaskContext) -> dict[str, Any]:
    return await _hold(ctx)


@worker.handler(queue=QUEUE, type="keyed")
async def keyed(ctx: TaskContext) -> dict[str, Any]:
    return await _hold(ctx)


@worker.handler(queue=LIMITED_QUEUE, type="limited")
async def limited(ctx: TaskContext) -> dict[str, Any]:
    return await _hold(ctx)
