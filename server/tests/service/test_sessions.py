"""Worker sessions through the session service: a reconnect keeps the leases it still holds,
within the rights of its key."""

from __future__ import annotations

from orbit_server.pulse.model import TaskSpec
from orbit_server.pulse.sessions import HeldRef
from orbit_server.pulse.worker import Session, Want
from orbit_server.runtime.node import Node
from orbit_server.store import tasks as task_store
from tests.conftest import OTHER_TENANT, SCOPE

HANDLERS = [{"queue": "emails", "type": "send", "versions": []},
            {"queue": "reports", "type": "build", "versions": ["2"]}]  # fmt: skip


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
