"""Conformance: the workflow instances' store methods, on every dialect."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.scope import Scope
from orbit_server.store import Database, Tx
from orbit_server.store import workflows as workflow_store
from orbit_server.store.base import DuplicateKey
from orbit_server.weave.model import Workflow
from orbit_server.weave.states import WorkflowState
from tests.store.builders import OTHER, SCOPE

W = WorkflowState


def workflow(
    clock: FakeClock, workflow_id: str, definition: str = "signup", scope: Scope = SCOPE,
    key: str | None = None,
) -> Workflow:  # fmt: skip
    now = clock.now()
    return Workflow(
        id=workflow_id, scope=scope, definition=definition, version="1", state=W.RUNNING,
        input={"user": workflow_id}, output=None, error=None,
        context={"steps": {}, "visits": {}, "seq": 0}, control_version=0,
        gate_id=f"gate_{workflow_id}", idempotency_key=key,
        request_hash=None if key is None else "h" * 64, created_at=now, updated_at=now,
        finished_at=None,
    )  # fmt: skip


async def insert(db: Database, *workflows: Workflow) -> None:
    async def unit(tx: Tx) -> None:
        for w in workflows:
            await workflow_store.workflow_insert(tx, w)

    await db.run(unit)


@pytest.mark.covers(
    "workflow_insert", "workflow_get", "workflow_get_by_idempotency_key", "workflow_lock",
    "workflows_lock_many", "workflows_update_many",
)  # fmt: skip
async def test_instances_round_trip_lock_and_change(db: Database, clock: FakeClock) -> None:
    one, two = workflow(clock, "wf_1", key="k1"), workflow(clock, "wf_2")
    await insert(db, one, two)
    with pytest.raises(DuplicateKey):
        await insert(db, workflow(clock, "wf_3", key="k1"))
    await insert(db, workflow(clock, "wf_4", scope=OTHER, key="k1"))  # another scope: fine

    async def read(tx: Tx) -> tuple[object, ...]:
        return (
            await workflow_store.workflow_get(tx, SCOPE, "wf_1"),
            await workflow_store.workflow_get(tx, OTHER, "wf_1"),
            await workflow_store.workflow_get_by_idempotency_key(tx, SCOPE, "k1"),
            await workflow_store.workflow_get_by_idempotency_key(tx, SCOPE, "k9"),
            await workflow_store.workflow_lock(tx, "wf_2"),
            await workflow_store.workflow_lock(tx, "none"),
            [w.id for w in await workflow_store.workflows_lock_many(tx, ["wf_2", "x", "wf_1"])],
            await workflow_store.workflows_lock_many(tx, []),
        )

    assert await db.run(read) == (one, None, one, None, two, None, ["wf_1", "wf_2"], [])
    done = clock.advance(timedelta(seconds=5))
    finished = dataclasses.replace(
        one, state=W.SUCCEEDED, output={"ok": True}, control_version=2,
        context={"steps": {"a": {}}, "seq": 1}, updated_at=done, finished_at=done,
    )  # fmt: skip
    failed = dataclasses.replace(two, state=W.FAILED, error={"message": "no"}, updated_at=done)
    changed = [finished, failed]

    async def update(tx: Tx) -> None:
        await workflow_store.workflows_update_many(tx, changed)
        await workflow_store.workflows_update_many(tx, [])

    await db.run(update)

    async def read_back(tx: Tx) -> list[Workflow | None]:
        return [await workflow_store.workflow_get(tx, SCOPE, w.id) for w in changed]

    found = await db.read(read_back)
    assert found == changed


@pytest.mark.covers("workflows_list", "workflows_finished_before", "workflow_delete")
async def test_instances_are_listed_newest_first_and_forgotten_when_old(
    db: Database, clock: FakeClock
) -> None:
    rows = [workflow(clock, f"wf_{i}", "a" if i % 2 else "b") for i in range(5)]
    rows[3] = dataclasses.replace(rows[3], state=W.SUCCEEDED, finished_at=clock.now())
    rows[4] = dataclasses.replace(rows[4], state=W.SUCCEEDED, finished_at=clock.now())
    await insert(db, *rows, workflow(clock, "wf_9", scope=OTHER))

    async def ids(
        definition: str | None = None,
        state: str | None = None,
        before: str | None = None,
        limit: int = 10,
    ) -> list[str]:
        found = await db.read(
            lambda tx: workflow_store.workflows_list(
                tx, SCOPE, definition=definition, state=state, before=before, limit=limit
            )
        )
        return [w.id for w in found]  # fmt: skip

    assert await ids() == ["wf_4", "wf_3", "wf_2", "wf_1", "wf_0"]
    assert await ids(before="wf_3", limit=2) == ["wf_2", "wf_1"]
    assert await ids(definition="a") == ["wf_3", "wf_1"]
    assert await ids(state="succeeded") == ["wf_4", "wf_3"]
    assert await ids(definition="b", state="succeeded") == ["wf_4"]
    later = clock.advance(timedelta(days=1))

    async def old(tx: Tx) -> list[tuple[str, str]]:
        return sorted(await workflow_store.workflows_finished_before(tx, later, limit=10))

    assert await db.read(old) == [("wf_3", "gate_wf_3"), ("wf_4", "gate_wf_4")]
    assert await db.read(
        lambda tx: workflow_store.workflows_finished_before(tx, rows[4].created_at, limit=10)
    ) == []  # fmt: skip
    await db.run(lambda tx: workflow_store.workflow_delete(tx, "wf_3"))
    assert await db.read(old) == [("wf_4", "gate_wf_4")]
    assert await db.read(lambda tx: workflow_store.workflow_get(tx, SCOPE, "wf_3")) is None
