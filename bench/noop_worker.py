"""The SDK worker the throughput scenario runs: one no-op handler."""

from __future__ import annotations

from orbit_sdk.worker import TaskContext, Worker

worker = Worker()


@worker.handler(queue="bench", type="noop")
async def noop(ctx: TaskContext) -> None:
    return None
