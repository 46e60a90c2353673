"""A fault-injecting store around the real one: lost commit acknowledgements, lock-wait
timeouts and deadlocks mid-unit. No double terminal state; units are retried whole; an unknown
outcome of unsafe work is resolved by reading, never by running it again."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from orbit_server.errors import CommitOutcomeUnknown, DatabaseUnavailable
from orbit_server.pulse.model import TaskSpec
from orbit_server.pulse.states import SideEffect
from orbit_server.pulse.worker import Outcome, Session, Want, WorkerService
from orbit_server.runtime.node import Node
from orbit_server.store import Database, Tx
from orbit_server.store import queues as queue_store
from orbit_server.store import task_events as event_store
from orbit_server.store.base import T, TransientConflict, Unit
from tests.conftest import SCOPE
from tests.support.wrapped_database import WrappedDatabase

ALICE = Session("s", "n", "w")


class FaultyDatabase(WrappedDatabase):
    """Delegates to a real backend; injects one planned fault into the next units."""

    def __init__(self, real: Database) -> None:
        super().__init__(real)
        self.lose_next_ack = False
        self.conflicts_left = 0
        self.attempts = 0

    async def _run_once(self, unit: Unit[T], *, write: bool, timeout_s: float) -> T:
        self.attempts += 1

        async def faulty(tx: Tx) -> T:
            result = await unit(tx)
            if self.conflicts_left > 0:  # after the unit's writes, before COMMIT
                self.conflicts_left -= 1
                raise TransientConflict("injected deadlock / lock wait timeout")
            return result

        result = await super()._run_once(faulty, write=write, timeout_s=timeout_s)
        if write and self.lose_next_ack:
            self.lose_next_ack = False
            raise CommitOutcomeUnknown()  # the commit happened; its answer was lost
        return result


@pytest.fixture
def faulty(node: Node) -> tuple[FaultyDatabase, WorkerService]:
    db = FaultyDatabase(node.db)
    return db, WorkerService(db, node.clock, lease_ms=node.settings.lease_ms)


async def events(node: Node) -> Counter[str]:
    found = await node.db.read(lambda tx: event_store.task_event_list_pending(tx, limit=100))
    return Counter(e.state for e in found)


async def started_lease(node: Node, workers: WorkerService, **spec: Any) -> Any:
    await node.tasks.submit(SCOPE, TaskSpec(queue="q", type="t", **spec))
    [lease] = await workers.claim(SCOPE, ALICE, [Want("q", "t", 1)], limit=1)
    await workers.start(lease.ref)
    return lease


async def test_a_lost_commit_ack_never_makes_a_second_terminal_state(
    node: Node, faulty: tuple[FaultyDatabase, WorkerService]
) -> None:
    db, workers = faulty
    lease = await started_lease(node, workers, side_effect=SideEffect.UNSAFE)
    db.lose_next_ack = True
    with pytest.raises(CommitOutcomeUnknown):
        await workers.complete(lease.ref, {"charged": 1})
    # The worker resends; the read shows the first report committed: acknowledged, not redone.
    assert await workers.complete(lease.ref, {"charged": 1}) is Outcome.ALREADY
    task = await node.tasks.get(SCOPE, lease.task.id)
    assert (task.state, task.result) == ("succeeded", {"charged": 1})
    assert await events(node) == Counter({"succeeded": 1})


async def test_conflicts_mid_unit_retry_the_whole_unit(
    node: Node, faulty: tuple[FaultyDatabase, WorkerService]
) -> None:
    db, workers = faulty
    lease = await started_lease(node, workers)
    db.conflicts_left = 2
    before = db.attempts
    assert await workers.complete(lease.ref, "done") is Outcome.ACCEPTED
    assert db.attempts - before == 3  # two rolled-back attempts, then the whole unit again
    q = await node.db.read(lambda tx: queue_store.queue_get(tx, SCOPE, "q"))
    assert q is not None and q.active == 0  # released once, not three times
    assert await events(node) == Counter({"succeeded": 1})


async def test_a_lost_ack_on_a_claim_leaves_work_that_expiry_returns(
    node: Node, faulty: tuple[FaultyDatabase, WorkerService]
) -> None:
    from datetime import timedelta

    db, workers = faulty
    await node.tasks.submit(SCOPE, TaskSpec(queue="q", type="t", side_effect=SideEffect.UNSAFE))
    db.lose_next_ack = True
    with pytest.raises(CommitOutcomeUnknown):
        await workers.claim(SCOPE, ALICE, [Want("q", "t", 1)], limit=1)
    # Nobody learned the lease, so nothing started: expiry returns it without using an attempt.
    node.clock.advance(timedelta(milliseconds=node.settings.lease_ms + 1))  # type: ignore[attr-defined]
    assert await node.workers.expire_leases() == 1
    [task] = (await node.tasks.list_tasks(SCOPE, limit=10))[0]
    assert (task.state, task.attempts) == ("pending", 0)


async def test_an_unknown_outcome_of_started_unsafe_work_goes_to_needs_review(
    node: Node, faulty: tuple[FaultyDatabase, WorkerService]
) -> None:
    from datetime import timedelta

    db, workers = faulty
    lease = await started_lease(node, workers, side_effect=SideEffect.UNSAFE)
    db.conflicts_left = 100  # the worker's report can never commit
    with pytest.raises(DatabaseUnavailable, match="busy"):
        await workers.complete(lease.ref, "done")
    db.conflicts_left = 0
    node.clock.advance(timedelta(milliseconds=node.settings.lease_ms + 1))  # type: ignore[attr-defined]
    await node.workers.expire_leases()
    task = await node.tasks.get(SCOPE, lease.task.id)
    assert task.state == "needs_review"  # not rerun: an operator decides
    assert await events(node) == Counter({"needs_review": 1})
