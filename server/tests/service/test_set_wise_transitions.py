"""A batch of transitions is written set by set: a lease-expiry pass or a drain makes as many
writes for forty tasks as for five, and every task still ends where the table says."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.pulse.model import TaskSpec
from orbit_server.pulse.retry import RetryPolicy
from orbit_server.pulse.states import Event, SideEffect
from orbit_server.pulse.worker import Report, Session, Want, WorkerService
from orbit_server.runtime.node import Node
from orbit_server.store import queues as queue_store
from orbit_server.store import tasks as task_store
from tests.conftest import SCOPE
from tests.support.wrapped_database import CountingDatabase

ALICE = Session("sess_a", "node-1", "worker-a")


async def expire_a_mixed_batch(node: Node, clock: FakeClock, each: int) -> Counter[str]:
    """``each`` tasks of each kind leased in two queues: unstarted, started idempotent with
    attempts left, started unsafe; then their leases end and one pass handles them all."""
    specs = [
        TaskSpec(queue=queue, type="t", side_effect=effect, retry=RetryPolicy(max_attempts=3))
        for queue in ("a", "b")
        for effect in (SideEffect.IDEMPOTENT, SideEffect.UNSAFE)
        for _ in range(each)
    ]
    await node.tasks.submit_many(SCOPE, specs)
    wants = [Want(queue=q, type="t", free=1000) for q in ("a", "b")]
    leases = await node.workers.claim(SCOPE, ALICE, wants, limit=1000)
    unstarted = {lease.task.id for lease in leases[: len(leases) // 3]}
    for lease in leases[len(leases) // 3 :]:
        await node.workers.start(lease.ref)
    clock.advance(timedelta(milliseconds=node.settings.lease_ms * 10))
    counting = CountingDatabase(node.db)
    workers = WorkerService(counting, clock, lease_ms=node.settings.lease_ms)
    assert await workers.expire_leases(limit=1000) == len(leases)
    tasks = {t.id: t for t in await node.db.read(lambda tx: task_store.task_list(
        tx, SCOPE, limit=1000, before=task_store.LAST, queue=None, state=None))}  # fmt: skip
    for lease in leases:
        task = tasks[lease.task.id]
        if lease.task.id in unstarted:
            assert task.state == "pending"
        elif task.side_effect == SideEffect.UNSAFE:
            assert task.state == "needs_review"  # never run twice silently
        else:
            assert task.state == "scheduled"  # retried after its backoff
    for queue in ("a", "b"):
        record = await node.db.read(lambda tx, q=queue: queue_store.queue_get(tx, SCOPE, q))
        assert record is not None and record.active == 0
    return counting.writes


@pytest.mark.parametrize("each", [2, 12])
async def test_a_lease_expiry_pass_writes_set_by_set(
    node: Node, clock: FakeClock, each: int
) -> None:
    writes = await expire_a_mixed_batch(node, clock, each)
    # Each statement runs once for the whole pass, whatever its size; each queue's row once.
    assert writes.pop("queue_add_counts") == 2
    assert set(writes.values()) == {1}, writes


async def start_and_succeed(node: Node, queue: str, each: int) -> Counter[str]:
    """Statements of the start and of the results of a batch of ``each`` leased tasks."""
    await node.tasks.submit_many(SCOPE, [TaskSpec(queue=queue, type="t")] * each)
    leases = await node.workers.claim(SCOPE, ALICE, [Want(queue, "t", 1000)], limit=1000)
    counting = CountingDatabase(node.db)
    workers = WorkerService(counting, node.clock, lease_ms=node.settings.lease_ms)
    refs = [lease.ref for lease in leases]
    await workers.start_many(refs)
    await workers.report_many([Report(ref, Event.COMPLETE, result=None) for ref in refs])
    return counting.writes + counting.reads


async def test_counting_milestones_costs_the_hot_path_no_statement(node: Node) -> None:
    """Starts and successes are counted from the units' domain events, after the commit: the
    statements of a batch's start and of its results stay the same few whatever its size."""
    few = await start_and_succeed(node, "few", 3)
    many = await start_and_succeed(node, "many", 20)
    assert few == many

    def count(queue: str, event: str) -> float | None:
        return node.metrics.registry.get_sample_value(
            "orbit_queue_task_events_total", {"queue": queue, "event": event}
        )

    for queue, each in (("few", 3), ("many", 20)):
        assert [count(queue, e) for e in ("submitted", "started", "succeeded")] == [each] * 3
