"""Conformance: bulk operations in the store (the operation, its frozen items, the selection's
reads of tasks and the waiting-task changes), on every dialect."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.pulse.model import Settled, TaskSelection
from orbit_server.pulse.states import TaskState
from orbit_server.store import Database, Tx
from orbit_server.store import bulk as bulk_store
from orbit_server.store import claim_range as ready_store
from orbit_server.store import tasks as task_store
from orbit_server.weave.states import WorkflowState
from tests.store.builders import OTHER, SCOPE, insert, task
from tests.store.test_workflows_store import insert as insert_workflows
from tests.store.test_workflows_store import workflow


@pytest.mark.covers(
    "bulk_insert", "bulk_get", "bulk_list", "bulk_next_running", "bulk_items_pending",
    "bulk_items_settle", "bulk_progress", "bulk_items_list", "bulk_prune", "bulk_lock_by_id",
)  # fmt: skip
async def test_an_operation_settles_each_frozen_item_once(db: Database, clock: FakeClock) -> None:
    async def create(tx: Tx, op_id: str, targets: list[str]) -> None:
        await bulk_store.bulk_insert(
            tx, op_id=op_id, scope=SCOPE, kind="tasks", action="cancel",
            filter_={"queue": "emails"}, params={"reason": "x"}, targets=targets,
            created_by="key_1", now=clock.now(),
        )  # fmt: skip

    await db.run(lambda tx: create(tx, "bulk_1", ["t1", "t2", "t3"]))
    await db.run(lambda tx: create(tx, "bulk_2", []))
    empty = await db.read(lambda tx: bulk_store.bulk_get(tx, SCOPE, "bulk_2"))
    assert empty is not None and empty.state == "completed" and empty.matched == 0
    assert await db.read(lambda tx: bulk_store.bulk_get(tx, OTHER, "bulk_1")) is None
    listed = await db.read(lambda tx: bulk_store.bulk_list(tx, SCOPE, before="~", limit=10))
    assert [o.id for o in listed] == ["bulk_2", "bulk_1"]
    assert await db.read(lambda tx: bulk_store.bulk_list(tx, SCOPE, before="bulk_2", limit=10))

    async def step(tx: Tx) -> tuple[str | None, list[tuple[int, str]]]:
        op = await bulk_store.bulk_next_running(tx)
        if op is None:
            return None, []
        items = await bulk_store.bulk_items_pending(tx, op.id, limit=2)
        await bulk_store.bulk_items_settle(
            tx, op.id, [Settled(items[0][0], "done", None), Settled(items[1][0], "skipped",
                                                                      "state_conflict")]
        )  # fmt: skip
        await bulk_store.bulk_progress(
            tx, op, done=1, skipped=1, failed=0, skipped_reasons={"state_conflict": 1},
            state="running", now=clock.now(),
        )  # fmt: skip
        return op.id, items

    assert await db.run(step) == ("bulk_1", [(0, "t1"), (1, "t2")])
    op = await db.run(lambda tx: bulk_store.bulk_lock_by_id(tx, "bulk_1"))
    assert op is not None
    assert (op.done, op.skipped, op.skipped_reasons) == (1, 1, {"state_conflict": 1})
    # A settled item is never settled again.
    await db.run(lambda tx: bulk_store.bulk_items_settle(tx, "bulk_1", [Settled(0, "failed", "x")]))
    items = await db.read(lambda tx: bulk_store.bulk_items_list(tx, "bulk_1", after=-1, limit=10))
    assert [(i.seq, i.target_id, i.state, i.reason) for i in items] == [
        (0, "t1", "done", None), (1, "t2", "skipped", "state_conflict"), (2, "t3", "pending", None)
    ]  # fmt: skip
    assert await db.read(lambda tx: bulk_store.bulk_items_pending(tx, "bulk_1", limit=5)) == [
        (2, "t3")
    ]
    clock.advance(timedelta(seconds=1))
    await db.run(
        lambda tx: bulk_store.bulk_progress(
            tx,
            op,
            done=1,
            skipped=0,
            failed=0,
            skipped_reasons={},
            state="completed",
            now=clock.now(),
        )
    )
    assert await db.run(bulk_store.bulk_next_running) is None
    done = await db.read(lambda tx: bulk_store.bulk_get(tx, SCOPE, "bulk_1"))
    assert done is not None and done.state == "completed" and done.finished_at == clock.now()

    # Retention: the items go first, a budget at a time, then the operation.
    assert empty.finished_at is not None and empty.finished_at < clock.now()
    assert await db.run(lambda tx: bulk_store.bulk_prune(tx, clock.now(), limit=2)) == 1
    assert await db.run(lambda tx: bulk_store.bulk_prune(tx, clock.now(), limit=2)) == 0
    clock.advance(timedelta(days=1))
    later = clock.now()
    assert await db.run(lambda tx: bulk_store.bulk_prune(tx, later, limit=2)) == 2
    assert await db.run(lambda tx: bulk_store.bulk_prune(tx, later, limit=2)) == 1
    assert await db.run(lambda tx: bulk_store.bulk_prune(tx, later, limit=2)) == 1
    assert await db.run(lambda tx: bulk_store.bulk_prune(tx, later, limit=2)) == 0
    assert await db.read(lambda tx: bulk_store.bulk_list(tx, SCOPE, before="~", limit=10)) == []


@pytest.mark.covers(
    "tasks_select", "tasks_lock_batch", "task_set_priority", "task_move_run_at"
)  # fmt: skip
async def test_a_selection_reads_tasks_by_their_columns(db: Database, clock: FakeClock) -> None:
    early = task(clock, "t1", labels={"team": "a"})
    clock.advance(timedelta(seconds=10))
    later = dataclasses.replace(
        task(clock, "t2", queue="reports"), state=TaskState.SCHEDULED,
        run_at=clock.now() + timedelta(hours=1),
    )  # fmt: skip
    rows = [early, later, task(clock, "t3", type="other"), task(clock, "t4", scope=OTHER)]
    await insert(db, *rows)
    await db.run(lambda tx: ready_store.task_ready_insert(tx, early))

    async def ids(selection: TaskSelection, after: str = "", limit: int = 10) -> list[str]:
        found = await db.read(
            lambda tx: bulk_store.tasks_select(tx, SCOPE, selection, after=after, limit=limit)
        )
        return [t.id for t in found]

    assert await ids(TaskSelection()) == ["t1", "t2", "t3"]
    assert await ids(TaskSelection(), after="t1", limit=1) == ["t2"]
    assert await ids(TaskSelection(queue="reports")) == ["t2"]
    assert await ids(TaskSelection(states=("scheduled", "failed"))) == ["t2"]
    assert await ids(TaskSelection(type="other")) == ["t3"]
    assert await ids(TaskSelection(ids=("t3", "t4"))) == ["t3"]  # t4: another scope
    assert await ids(TaskSelection(created_to=later.created_at)) == ["t1"]
    assert await ids(TaskSelection(created_from=later.created_at)) == ["t2", "t3"]
    assert await ids(TaskSelection(finished_from=early.created_at)) == []  # none finished
    [first] = await db.read(
        lambda tx: bulk_store.tasks_select(tx, SCOPE, TaskSelection(ids=("t1",)), after="", limit=5)
    )
    assert (first.state, first.labels, first.error_code) == ("pending", {"team": "a"}, None)

    locked = await db.run(lambda tx: bulk_store.tasks_lock_batch(tx, SCOPE, ["t2", "t1", "t4"]))
    assert {i: t.state for i, t in locked.items()} == {"t1": "pending", "t2": "scheduled"}
    now = clock.now()
    assert await db.run(lambda tx: bulk_store.task_set_priority(tx, "t1", 7, now))
    assert await db.run(lambda tx: bulk_store.task_set_priority(tx, "t2", 3, now))
    got = await db.read(lambda tx: task_store.task_get(tx, SCOPE, "t1"))
    assert got is not None and got.priority == 7
    candidates = await db.read(
        lambda tx: ready_store.ready_candidates(tx, SCOPE, "emails", "send", limit=5)
    )
    assert [(c.task_id, c.priority) for c in candidates] == [("t1", 7)]
    moved = now + timedelta(days=1)
    assert await db.run(lambda tx: bulk_store.task_move_run_at(tx, "t2", moved, now))
    assert not await db.run(lambda tx: bulk_store.task_move_run_at(tx, "t1", moved, now))
    got = await db.read(lambda tx: task_store.task_get(tx, SCOPE, "t2"))
    assert got is not None and got.run_at == moved and got.priority == 3


@pytest.mark.covers("workflows_select")
async def test_a_workflow_selection_reads_instances_by_their_columns(
    db: Database, clock: FakeClock
) -> None:
    first = workflow(clock, "wf_1")
    clock.advance(timedelta(seconds=5))
    rows = [
        first,
        dataclasses.replace(workflow(clock, "wf_2"), state=WorkflowState.PAUSED),
        workflow(clock, "wf_3", definition="billing"),
        workflow(clock, "wf_4", scope=OTHER),
    ]
    await insert_workflows(db, *rows)

    async def ids(**filters: object) -> list[str]:
        return await db.read(
            lambda tx: bulk_store.workflows_select(tx, SCOPE, after="", limit=10, **filters)  # type: ignore[arg-type]
        )

    assert await ids() == ["wf_1", "wf_2", "wf_3"]
    assert await ids(definition="signup") == ["wf_1", "wf_2"]
    assert await ids(states=["paused"]) == ["wf_2"]
    assert await ids(ids=["wf_3", "wf_4"]) == ["wf_3"]
    assert await ids(created_to=rows[1].created_at) == ["wf_1"]
    assert await ids(created_from=rows[1].created_at, definition="billing") == ["wf_3"]
    page = await db.read(lambda tx: bulk_store.workflows_select(tx, SCOPE, after="wf_1", limit=1))
    assert page == ["wf_2"]
