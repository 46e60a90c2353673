"""A real SDK worker against a served node, on every dialect: the handler of a workflow step
sees the step it serves in ``ctx.workflow`` (a plain task's handler sees ``None``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from orbit_sdk import AsyncClient, TaskStep, Workflow, WorkflowInstance
from orbit_sdk.worker import TaskContext, Worker, WorkflowContext
from orbit_server.governance.keys import Role
from orbit_server.weave.engine import item_key, parse_key, round_key, step_key
from tests.conftest import SCOPE, make_key
from tests.gateway.conftest import Live
from tests.service.weave_support import settle

QUEUE = "steps"
WAIT_S = 10


@pytest.fixture
async def orbit(live: Live) -> AsyncIterator[tuple[AsyncClient, Worker]]:
    url = live.url.replace("ws://", "http://").removesuffix("/v1/worker")
    key = await make_key(live.node, SCOPE, Role.SUBMITTER, Role.WORKER, Role.OPERATOR)
    async with AsyncClient(url=url, api_key=key) as client:
        yield client, Worker(url, key, concurrency=4, worker_id="workflow-context-test")


async def test_a_step_handler_sees_its_workflow(
    orbit: tuple[AsyncClient, Worker], live: Live
) -> None:
    client, worker = orbit
    flow = Workflow("album", version="3")
    flow.task("prepare", queue=QUEUE, type="step", params="{'n': 0}")
    flow.map("thumbnails", items="input.images", task=TaskStep(queue=QUEUE, type="step"))
    await client.publish_workflow(flow)
    seen: list[WorkflowContext | None] = []

    @worker.handler(queue=QUEUE, type="step")
    async def step(ctx: TaskContext) -> dict[str, Any]:
        seen.append(ctx.workflow)
        return {}

    @worker.handler(queue=QUEUE, type="plain")
    def plain(ctx: TaskContext) -> None:
        seen.append(ctx.workflow)

    running = asyncio.create_task(worker.run_async())
    try:
        run = await client.start_workflow("album", {"images": ["a", "b"]})

        async def finished() -> WorkflowInstance | None:
            await settle(live.node)  # the node's advancement loop does not run in tests
            instance = await client.get_workflow(run.id)
            return instance if instance.is_terminal else None

        async with asyncio.timeout(WAIT_S):
            while (done := await finished()) is None:
                await asyncio.sleep(0.01)
        task = await client.submit(QUEUE, "plain")
        assert (await client.wait_for_task(task.id, timeout=WAIT_S)).state == "succeeded"
    finally:
        await worker.stop_async(grace_s=1)
        await running
    assert done.state == "succeeded"
    assert seen[-1] is None  # the plain task
    keys = {w.step_key: w for w in seen[:-1] if w is not None}
    assert len(seen) - 1 == len(keys) == 3
    assert keys["prepare"] == WorkflowContext(
        instance_id=run.id, definition="album", version="3", step="prepare", step_key="prepare"
    )
    for item in (0, 1):
        assert keys[f"thumbnails:i{item}"] == WorkflowContext(
            instance_id=run.id, definition="album", version="3", step="thumbnails",
            step_key=f"thumbnails:i{item}", item=item,
        )  # fmt: skip


@pytest.mark.parametrize(
    ("key", "parsed"),
    [
        (step_key("charge", 1), ("charge", None, None)),
        (step_key("charge", 2), ("charge", None, None)),
        (item_key("thumbnails", 17), ("thumbnails", None, 17)),
        (item_key(step_key("thumbnails", 2), 0), ("thumbnails", None, 0)),
        (round_key("published", 3), ("published", 3, None)),
        (round_key(step_key("published", 4), 12), ("published", 12, None)),
        ("r2d2", ("r2d2", None, None)),  # a step id that looks like a round is no round
    ],
)
def test_an_execution_key_names_its_step_round_and_item(
    key: str, parsed: tuple[str, int | None, int | None]
) -> None:
    assert parse_key(key) == parsed
