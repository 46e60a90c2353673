"""Rows the store conformance tests start from: tasks built as the service builds them,
written and leased through the store's own methods."""

from __future__ import annotations

from datetime import datetime, timedelta

from orbit_server.clock import FakeClock
from orbit_server.pulse.model import Task, TaskSpec, new_task
from orbit_server.scope import Scope
from orbit_server.store import Database, Tx
from orbit_server.store import tasks as task_store
from orbit_server.store.tasks import LeaseGrant

SCOPE = Scope("acme", "prod")
OTHER = Scope("acme", "staging")
LEASE = timedelta(seconds=30)


def task(clock: FakeClock, task_id: str, scope: Scope = SCOPE, **spec: object) -> Task:
    """A new task of queue ``emails`` and type ``send`` unless ``spec`` says otherwise."""
    fields: dict[str, object] = {"queue": "emails", "type": "send"}
    fields.update(spec)
    return new_task(
        TaskSpec(**fields),  # type: ignore[arg-type]
        task_id=task_id,
        scope=scope,
        now=clock.now(),
        default_timeout_ms=300_000,
    )


async def insert(db: Database, *tasks: Task) -> None:
    async def unit(tx: Tx) -> None:
        for t in tasks:
            await task_store.task_insert(tx, t)

    await db.run(unit)


def grant(now: datetime, session_id: str = "ses_1") -> LeaseGrant:
    """A lease with token ``tok_1`` until ``now + LEASE``."""
    return LeaseGrant(
        lease_token="tok_1", expires_at=now + LEASE, session_id=session_id, node="node-a",
        worker_id="w1",
    )  # fmt: skip


async def lease(tx: Tx, now: datetime, *task_ids: str, session_id: str = "ses_1") -> list[Task]:
    """Lease pending tasks to ``session_id`` (``grant``)."""
    return await task_store.tasks_lease_many(tx, task_ids, grant(now, session_id), now)
