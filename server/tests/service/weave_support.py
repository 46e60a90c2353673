"""What the Weave service tests share: publishing, starting, a stand-in worker that runs the
tasks of a queue through Pulse's worker service, and running the runner's passes until the
instances have nothing more to do now."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orbit_server.audit import Actor
from orbit_server.pulse.worker import Outcome, Session, Want
from orbit_server.runtime.node import Node
from orbit_server.store import tasks as task_store
from orbit_server.weave.model import StepExecution, Workflow
from tests.conftest import SCOPE

ACTOR = Actor("test")
WORKER = Session("sess_w", "node-1", "worker-w")

Handler = Callable[[Any], Any]


def task(step_id: str, type_: str = "work", queue: str = "wf", **more: Any) -> dict[str, Any]:
    return {"id": step_id, "kind": "task", "queue": queue, "type": type_, **more}


def body(name: str, steps: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    return {"name": name, "version": "1", "steps": steps, **more}


async def publish(node: Node, definition: dict[str, Any]) -> None:
    await node.workflows.publish(SCOPE, definition, actor=ACTOR)


async def start(node: Node, name: str, input_: Any = None, **more: Any) -> Workflow:
    seen, created = await node.workflows.start(
        SCOPE, name, version=more.pop("version", None), input_=input_,
        idempotency_key=more.pop("idempotency_key", None),
    )  # fmt: skip
    assert created
    return seen.workflow


async def settle(node: Node) -> int:
    """Run result events and due waits until neither finds anything; answers the passes."""
    passes = 0
    while True:
        handled = await node.runner.consume() + await node.runner.wake_due()
        if handled == 0:
            return passes
        passes += 1
        assert passes < 10_000, "the runner never settles"


async def work(
    node: Node,
    handler: Handler | None = None,
    *,
    type_: str = "work",
    queue: str = "wf",
    limit: int = 1000,
    fail: bool = False,
) -> list[Any]:
    """Claim, start and finish up to ``limit`` claimable tasks of (queue, type): complete with
    ``handler(params)`` (the params themselves without one), or fail them. Answers the params
    of the tasks run."""
    leases = await node.workers.claim(
        SCOPE, WORKER, [Want(queue=queue, type=type_, free=limit)], limit=limit
    )
    seen = []
    for lease in leases:
        await node.workers.start(lease.ref)
        params = lease.task.params
        seen.append(params)
        if fail:
            outcome = await node.workers.fail(
                lease.ref, {"code": "boom", "message": "it broke"}, retryable=False
            )
        else:
            result = params if handler is None else handler(params)
            outcome = await node.workers.complete(lease.ref, result)
        assert outcome is Outcome.ACCEPTED
    return seen


async def run(node: Node, handler: Handler | None = None, **kw: Any) -> int:
    """Work and settle until no task of (queue, type) is claimable; answers the tasks run."""
    total = 0
    await settle(node)
    while True:
        ran = await work(node, handler, **kw)
        await settle(node)
        if not ran:
            return total
        total += len(ran)


async def get(node: Node, workflow_id: str) -> Workflow:
    return await node.workflows.get(SCOPE, workflow_id)


async def steps(node: Node, workflow_id: str) -> dict[str, StepExecution]:
    """Every step execution by key."""
    rows = await node.workflows.steps(SCOPE, workflow_id, after=0, limit=500)
    found = {r.key: r for r in rows}
    while len(rows) == 500:
        rows = await node.workflows.steps(SCOPE, workflow_id, after=rows[-1].seq, limit=500)
        found.update({r.key: r for r in rows})
    return found


async def task_states(node: Node, workflow_id: str) -> dict[str, str]:
    """The state of each step execution's task, by step key."""
    out = {}
    for key, row in (await steps(node, workflow_id)).items():
        if row.task_id is not None:
            found = await node.db.read(lambda tx, t=row.task_id: task_store.task_get(tx, SCOPE, t))
            assert found is not None
            out[key] = found.state
    return out
