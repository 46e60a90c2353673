"""``ctx.workflow``: filled from the delivery's ``workflow`` field, ``None`` without one."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from test_worker_support import FakeServer, delivery, running

from orbit_sdk.worker import TaskContext, Worker, WorkflowContext
from orbit_sdk.worker._logs import task_fields

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
                                 step="published", step_key="published:r2", round=2),
        "tsk_2": None,
    }  # fmt: skip


def test_records_about_a_step_task_name_its_instance_and_execution() -> None:
    step = WorkflowContext(instance_id="wf_1", definition="album", version="3",
                           step="thumbnails", step_key="thumbnails:i17", item=17)  # fmt: skip
    ctx = TaskContext(task_id="tsk_1", attempt=1, queue="q", type="t",
                      deadline=datetime.now(UTC), workflow=step)  # fmt: skip
    fields = task_fields(ctx)
    assert (fields["workflow_id"], fields["step_key"]) == ("wf_1", "thumbnails:i17")
