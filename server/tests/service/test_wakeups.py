"""The node's wake-ups follow the domain events its units commit: each signal fires for what
it is named after, and only once the change has committed."""

from __future__ import annotations

import pytest

from orbit_server.audit import Actor
from orbit_server.errors import QueueFull
from orbit_server.pulse.domain_events import RoomMade, TaskSettled, WorkCommitted
from orbit_server.pulse.model import TaskSpec
from orbit_server.pulse.service import QueueSettings
from orbit_server.pulse.worker import Session, Want
from orbit_server.runtime.node import Node
from tests.conftest import SCOPE

ALICE = Session("sess_a", "node-1", "worker-a")
OPERATOR = Actor("key_op", "operator")


def heard(node: Node) -> list[object]:
    events: list[object] = []
    for kind in (WorkCommitted, RoomMade, TaskSettled):
        node.db.bus.subscribe(kind, events.append)
    return events


async def submit(node: Node, **fields: object) -> str:
    spec = TaskSpec(**{"queue": "emails", "type": "send", **fields})  # type: ignore[arg-type]
    return (await node.tasks.submit(SCOPE, spec)).task.id


async def test_settled_fires_when_a_task_settles_not_when_it_is_made_or_starts(
    node: Node,
) -> None:
    events = heard(node)
    node.watch.queue_event(SCOPE, "emails")  # the queue's dispatch loop listens
    task_id = await submit(node)
    assert events == [WorkCommitted(SCOPE, "emails")]
    assert node.watch.take_work(SCOPE, "emails")  # the loop may claim without looking
    assert not node.watch.settled.is_set()
    [lease] = await node.workers.claim(
        SCOPE, ALICE, [Want(queue="emails", type="send", free=1)], limit=1
    )
    await node.workers.start(lease.ref)
    assert not node.watch.settled.is_set()
    with node.watch.watching(task_id) as changed:
        await node.workers.complete(lease.ref, {"ok": True})
        assert changed.is_set()  # the waiter of the task, at once
    assert node.watch.settled.is_set()
    assert set(events[1:]) == {RoomMade(SCOPE, "emails"), TaskSettled(task_id)}


async def test_a_submit_refused_by_its_quota_wakes_nobody(node: Node) -> None:
    await node.queues.update(SCOPE, "emails", QueueSettings(max_pending=1), actor=OPERATOR)
    await submit(node)
    events = heard(node)
    with pytest.raises(QueueFull):
        await submit(node)
    assert events == []


async def test_reopening_a_gate_wakes_the_queues_of_its_held_tasks(node: Node) -> None:
    gate = await node.gates.create(SCOPE)
    await node.gates.set_open(SCOPE, gate, open_=False)
    await submit(node, gate_id=gate)
    await submit(node, gate_id=gate, queue="reports")
    events = heard(node)
    await node.gates.set_open(SCOPE, gate, open_=True)
    assert set(events) == {WorkCommitted(SCOPE, "emails"), WorkCommitted(SCOPE, "reports")}


async def test_a_cancel_of_running_work_reaches_the_worker_after_the_commit(node: Node) -> None:
    asked: list[tuple[str, str | None]] = []
    node.watch.on_cancel_requested(lambda task_id, reason: asked.append((task_id, reason)))
    task_id = await submit(node)
    [lease] = await node.workers.claim(
        SCOPE, ALICE, [Want(queue="emails", type="send", free=1)], limit=1
    )
    await node.workers.start(lease.ref)
    await node.tasks.cancel(SCOPE, task_id, reason="no longer needed", actor=OPERATOR)
    assert asked == [(task_id, "no longer needed")]
    assert not node.watch.settled.is_set()  # asked to stop; it has not settled yet
