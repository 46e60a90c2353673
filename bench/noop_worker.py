"""The SDK worker the benchmark scenarios run: a no-op handler, and one that answers when it
started (for the latency scenario)."""

from __future__ import annotations

import time

from orbit_sdk.worker import TaskContext, Worker

worker = Worker()


@worker.handler(queue="bench", type="noop")
async def noop(ctx: TaskContext) -> None:
    return None


@worker.handler(queue="bench", type="stamp")
async def stamp(ctx: TaskContext) -> dict[str, float]:
    return {"started": time.time()}
