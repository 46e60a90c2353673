"""Worker sessions in the store, on every dialect."""

from __future__ import annotations

from datetime import timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.pulse.model import TaskSpec
from orbit_server.pulse.sessions import HeldRef
from orbit_server.pulse.worker import Session, Want
from orbit_server.runtime.node import Node
from orbit_server.store import Database, Tx
from orbit_server.store import claim_range as ready_store
from orbit_server.store import sessions as sstore
from orbit_server.store import tasks as task_store
from tests.conftest import OTHER_TENANT, SCOPE

HANDLERS = [{"queue": "emails", "type": "send", "versions": []},
            {"queue": "reports", "type": "build", "versions": ["2"]}]  # fmt: skip


async def open_session(db: Database, clock: FakeClock, session_id: str, node: str) -> None:
    async def unit(tx: Tx) -> None:
        session = sstore.NewSession(session_id, SCOPE, node, "w1", "key_1", 4, HANDLERS)
        await sstore.session_insert(tx, session, clock.now())

    await db.run(unit)


@pytest.mark.covers(
    "session_insert", "session_get", "session_close", "sessions_close_node",
    "sessions_touch_node", "sessions_per_queue", "sessions_prune",
)  # fmt: skip
async def test_sessions_are_counted_while_open_and_seen_then_pruned(
    db: Database, clock: FakeClock
) -> None:
    start = clock.now()
    await open_session(db, clock, "ses_a", "node-a")
    await open_session(db, clock, "ses_b", "node-b")
    found = await db.read(lambda tx: sstore.session_get(tx, "ses_a"))
    assert found is not None and found.handlers == HANDLERS and found.closed_at is None
    counted = await db.read(lambda tx: sstore.sessions_per_queue(tx, SCOPE, start))
    assert counted == {"emails": 2, "reports": 2}
    assert await db.read(lambda tx: sstore.sessions_per_queue(tx, OTHER_TENANT, start)) == {}
    clock.advance(timedelta(seconds=30))
    assert await db.run(lambda tx: sstore.sessions_touch_node(tx, "node-a", clock.now())) == 1
    recent = clock.now() - timedelta(seconds=1)
    # node-b stopped refreshing its sessions: they no longer count.
    assert await db.read(lambda tx: sstore.sessions_per_queue(tx, SCOPE, recent)) == {
        "emails": 1,
        "reports": 1,
    }
    assert await db.run(lambda tx: sstore.session_close(tx, "ses_a", clock.now()))
    assert not await db.run(lambda tx: sstore.session_close(tx, "ses_a", clock.now()))
    assert await db.run(lambda tx: sstore.sessions_close_node(tx, "node-b", clock.now())) == 1
    assert await db.read(lambda tx: sstore.sessions_per_queue(tx, SCOPE, start)) == {}
    clock.advance(timedelta(days=1))
    before = clock.now()
    assert await db.run(lambda tx: sstore.sessions_prune(tx, before, limit=1)) == 1
    assert await db.run(lambda tx: sstore.sessions_prune(tx, before, limit=10)) == 1
    assert await db.read(lambda tx: sstore.session_get(tx, "ses_a")) is None


@pytest.mark.covers("task_adopt", "ready_exists")
async def test_a_lease_moves_to_a_new_session_only_while_it_holds(
    node: Node, clock: FakeClock
) -> None:
    assert not await node.db.read(lambda tx: ready_store.ready_exists(tx, SCOPE, "emails"))
    await node.tasks.submit_many(SCOPE, [TaskSpec(queue="emails", type="send")])
    assert await node.db.read(lambda tx: ready_store.ready_exists(tx, SCOPE, "emails"))
    [lease] = await node.workers.claim(
        SCOPE, Session("ses_old", "n1", "w"), [Want("emails", "send", 1)], limit=1
    )
    ref = lease.ref

    async def adopt(tx: Tx) -> bool:
        adoption = task_store.LeaseAdoption(
            ref.task_id,
            ref.attempt,
            ref.lease_token,
            session_id="ses_new",
            node="n2",
            worker_id="w",
        )
        return await task_store.task_adopt(tx, adoption, clock.now())

    assert await node.db.run(adopt)
    assert [h.task_id for h in await node.workers.session_leases("ses_new")] == [ref.task_id]
    assert await node.workers.session_leases("ses_old") == []
    clock.advance(timedelta(milliseconds=node.settings.lease_ms + 1))
    assert not await node.db.run(adopt)  # the lease ran out: nothing to continue


@pytest.mark.covers("tasks_lock_many_in")
async def test_a_reconnect_adopts_only_leases_of_its_own_scope_and_queues(node: Node) -> None:
    """``hello.held`` with a real reference: adopted by a session of the task's scope and
    queues, refused (``stop``) to another tenant's and to a key limited to other queues,
    whose reads lock nothing of the task."""
    await node.tasks.submit_many(SCOPE, [TaskSpec(queue="emails", type="send")])
    [lease] = await node.workers.claim(
        SCOPE, Session("ses_old", "n1", "w"), [Want("emails", "send", 1)], limit=1
    )
    held = [HeldRef(lease.ref.task_id, lease.ref.attempt, lease.ref.lease_token)]
    locked = await node.db.read(
        lambda tx: task_store.tasks_lock_many_in(tx, OTHER_TENANT, [lease.ref.task_id])
    )
    assert locked == {}
    for scope, queues in ((OTHER_TENANT, None), (SCOPE, frozenset({"reports"}))):
        opened = await node.sessions.open(
            scope, key_id="key_x", worker_id="w", capacity=1, handlers=HANDLERS, held=held,
            queues=queues,
        )  # fmt: skip
        assert (opened.continuing, [r.task_id for r in opened.stopped]) == ([], [lease.ref.task_id])
    opened = await node.sessions.open(
        SCOPE, key_id="key_1", worker_id="w", capacity=1, handlers=HANDLERS, held=held,
        queues=frozenset({"emails"}),
    )  # fmt: skip
    assert [r.session_id for r in opened.continuing] == [opened.session_id]
