"""Direct dispatch (decision 0010): a lone task submitted while a local worker has a free slot
is leased to it in the submit's own transaction — when that overtakes nobody."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from orbit_server.audit import Actor
from orbit_server.pulse.model import TaskSpec
from orbit_server.pulse.service import QueueSettings
from orbit_server.pulse.worker import Lease, Session, Want
from orbit_server.runtime.node import Node
from orbit_server.scope import Scope
from orbit_server.store import claim_range as ready_store
from orbit_server.store import queues as queue_store
from tests.conftest import SCOPE

SESSION = Session("ses_direct", "node-1", "worker-1")
ACTOR = Actor("test")


@dataclass
class Slot:
    session: Session = SESSION
    delivered: list[Lease] = field(default_factory=list)
    given_back: int = 0

    def deliver(self, lease: Lease) -> None:
        self.delivered.append(lease)

    def give_back(self) -> None:
        self.given_back += 1


@dataclass
class OneSlot:
    """A node with one idle worker slot for queue ``q``, type ``t``."""

    slot: Slot = field(default_factory=Slot)
    asked: list[tuple[str, str, str | None]] = field(default_factory=list)

    def reserve(self, scope: Scope, queue: str, type_: str, version: str | None) -> Slot | None:
        self.asked.append((queue, type_, version))
        return self.slot if (queue, type_) == ("q", "t") else None


@pytest.fixture
async def direct(node: Node) -> OneSlot:
    """The queue exists (a task of another type waits in it: no obstacle for type ``t``)."""
    await node.tasks.submit_many(SCOPE, [TaskSpec(queue="q", type="other")])
    found = OneSlot()
    node.tasks.direct = found
    return found


async def ready_ids(node: Node) -> list[str]:
    rows = await node.db.read(
        lambda tx: ready_store.ready_candidates(tx, SCOPE, "q", "t", limit=10)
    )
    return [c.task_id for c in rows]


async def test_a_lone_task_goes_to_the_idle_worker_in_its_submit(
    node: Node, direct: OneSlot
) -> None:
    submitted = await node.tasks.submit(SCOPE, TaskSpec(queue="q", type="t", params={"n": 1}))
    assert submitted.created and submitted.task.state == "leased"
    [lease] = direct.slot.delivered
    assert (lease.ref.task_id, lease.ref.attempt) == (submitted.task.id, 1)
    assert lease.task.params == {"n": 1} and lease.task.session_id == SESSION.session_id
    task = await node.tasks.get(SCOPE, submitted.task.id)
    assert (task.state, task.lease_token) == ("leased", lease.ref.lease_token)
    [attempt] = await node.tasks.attempts(SCOPE, task.id)
    assert (attempt.number, attempt.state, attempt.session_id) == (1, "leased", "ses_direct")
    assert await ready_ids(node) == []  # it never entered the claim range
    queue = await node.db.read(lambda tx: queue_store.queue_get(tx, SCOPE, "q"))
    assert queue is not None and (queue.pending, queue.active) == (1, 1)  # 1: type other
    # The lease holds like any other: its worker starts and completes it.
    assert str(await node.workers.start(lease.ref)) == "started"
    assert str(await node.workers.complete(lease.ref, "ok")) == "accepted"
    assert (await node.tasks.get(SCOPE, task.id)).state == "succeeded"


async def test_a_task_of_a_type_with_waiting_work_queues_behind_it(
    node: Node, direct: OneSlot
) -> None:
    node.tasks.direct = None
    [older] = [
        s.task.id for s in await node.tasks.submit_many(SCOPE, [TaskSpec(queue="q", type="t")])
    ]
    node.tasks.direct = direct
    newer = await node.tasks.submit(SCOPE, TaskSpec(queue="q", type="t"))
    assert newer.task.state == "pending" and direct.slot.delivered == []
    assert direct.slot.given_back == 1  # tried, rolled back, submitted as usual
    assert await ready_ids(node) == [older, newer.task.id]
    queue = await node.db.read(lambda tx: queue_store.queue_get(tx, SCOPE, "q"))
    assert queue is not None and (queue.pending, queue.active) == (3, 0)


@pytest.mark.parametrize("setting", ["paused", "limit"])
async def test_a_paused_or_limited_queue_takes_the_ordinary_path(
    node: Node, direct: OneSlot, setting: str
) -> None:
    settings = (
        QueueSettings(paused=True) if setting == "paused" else QueueSettings(concurrency_limit=5)
    )
    await node.queues.update(SCOPE, "q", settings, actor=ACTOR)
    submitted = await node.tasks.submit(SCOPE, TaskSpec(queue="q", type="t"))
    assert submitted.task.state == "pending" and direct.slot.given_back == 1
    assert (await node.tasks.get(SCOPE, submitted.task.id)).state == "pending"


@pytest.mark.parametrize(
    "fields",
    [{"concurrency_key": "k"}, {"delay_ms": 1000}, {"idempotency_key": "once"}],
)
async def test_keyed_delayed_or_idempotent_submits_are_never_leased_directly(
    node: Node, direct: OneSlot, fields: dict[str, object]
) -> None:
    submitted = await node.tasks.submit(SCOPE, TaskSpec(queue="q", type="t", **fields))  # type: ignore[arg-type]
    assert submitted.task.state != "leased" and direct.asked == []


async def test_a_batch_is_never_leased_directly(node: Node, direct: OneSlot) -> None:
    done = await node.tasks.submit_many(SCOPE, [TaskSpec(queue="q", type="t")] * 2)
    assert [d.task.state for d in done] == ["pending", "pending"] and direct.asked == []
    leases = await node.workers.claim(SCOPE, SESSION, [Want("q", "t", 2)], limit=2)
    assert len(leases) == 2
