"""``ctx.workflow``: filled from the delivery's ``workflow`` field, ``None`` without one."""

from __future__ import annotations

import asyncio

from test_worker_support import FakeServer, delivery, running

from orbit_sdk.worker import TaskContext, Worker, WorkflowContext

TIMEOUT = 5.0


async def test_the_delivered_step_is_the_handlers_workflow_context() -> None:
    seen: dict[str, WorkflowContext | None] = {}
    done = asyncio.Event()
    step = {"id": "wf_1", "definition": "album", "version": "3", "step": "published",
            "key": "published:r2", "round": 2}  # fmt: skip
    async with FakeServer() as server:
        worker = Worker(server.url, "test-key", worker_id="w-test", concurrency=2, prefetch=0)

        @worker.handler(queue="q", type="t")
        async def handle(ctx: TaskContext) -> None:
            seen[ctx.task_id] = ctx.workflow
            if len(seen) == 2:
                done.set()

        async with running(worker):
            conn = await server.accept()
            await conn.welcome()
            await conn.send(
                {"type": "tasks", "items": [delivery("tsk_1", workflow=step), delivery("tsk_2")]}
            )
            await conn.start_all()
            await asyncio.wait_for(done.wait(), TIMEOUT)
    assert seen == {
        "tsk_1": WorkflowContext(instance_id="wf_1", definition="album", version="3",
                                 step="published", key="published:r2", round=2),
        "tsk_2": None,
    }  # fmt: skip
