"""Bulk operations through the service, on every dialect: the selection is frozen at the start,
each task is acted on once, what no longer fits is skipped with why, one audit record."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pytest

from orbit_server.audit import Actor
from orbit_server.errors import InvalidRequest, StateConflict
from orbit_server.pulse.bulk import BulkService
from orbit_server.pulse.bulk_tasks import TaskBulk, TaskFilter
from orbit_server.pulse.model import BulkRecord, Settled, TaskSelection, TaskSpec
from orbit_server.runtime.node import Node
from orbit_server.store import Tx
from tests.conftest import OTHER_TENANT, SCOPE

ACTOR = Actor("key_op")


def tasks_bulk(node: Node, max_targets: int = 1000, batch: int = 200) -> BulkService:
    kinds = {"tasks": TaskBulk(node.clock)}
    return BulkService(
        node.db, node.clock, node.audit_writer, kinds, max_targets=max_targets, batch=batch
    )


async def submit(node: Node, count: int, **spec: object) -> list[str]:
    fields: dict[str, object] = {"queue": "mail", "type": "send", "labels": {"wave": "1"}}
    fields.update(spec)
    done = await node.tasks.submit_many(
        SCOPE,
        [TaskSpec(**fields) for _ in range(count)],  # type: ignore[arg-type]
    )
    return [s.task.id for s in done]


async def run_out(bulk: BulkService) -> int:
    steps = 0
    while await bulk.step():
        steps += 1
    return steps


async def test_a_bulk_cancel_acts_on_the_frozen_selection_once(node: Node) -> None:
    bulk = tasks_bulk(node, max_targets=1000, batch=7)
    selected = await submit(node, 30)
    await submit(node, 5, labels={"wave": "2"})  # outside the filter
    what = TaskFilter(TaskSelection(queue="mail", states=("pending",)), label=("wave", "1"))
    plan = await bulk.dry_run(SCOPE, what)
    assert plan.matched == 30 and plan.sample == sorted(selected)[:10]
    assert all(t.state == "pending" for t in [await node.tasks.get(SCOPE, i) for i in selected])

    op = await bulk.start(SCOPE, action="cancel", what=what, filter_doc={"queue": "mail"},
                          params={"reason": "incident"}, actor=ACTOR)  # fmt: skip
    assert (op.state, op.matched, op.done) == ("running", 30, 0)
    late = await submit(node, 4)  # match the filter now, but after the selection froze
    await node.tasks.cancel(SCOPE, selected[0], reason="by hand", actor=ACTOR)
    assert await run_out(bulk) == 5  # 30 items in batches of 7
    op = await bulk.get(SCOPE, op.id)
    assert (op.state, op.done, op.skipped, op.failed) == ("completed", 29, 1, 0)
    assert op.skipped_reasons == {"already_cancelled": 1} and op.finished_at is not None
    tasks = [await node.tasks.get(SCOPE, i) for i in selected]
    assert {t.state for t in tasks} == {"cancelled"}
    assert {t.cancel_reason for t in tasks[1:]} == {"incident"}
    assert {(await node.tasks.get(SCOPE, i)).state for i in late} == {"pending"}
    items = await bulk.items(SCOPE, op.id, after=-1, limit=100)
    assert sorted(i.target_id for i in items) == sorted(selected)
    assert {i.target_id: (i.state, i.reason) for i in items}[selected[0]] == (
        "skipped",
        "already_cancelled",
    )
    audit = await node.audit.list(SCOPE, limit=50, before=None,
                                  target=("bulk_operation", op.id))  # fmt: skip
    assert [(a.action, a.details["matched"]) for a in audit] == [("tasks.bulk.cancel", 30)]
    task_audits = await node.audit.list(SCOPE, limit=50, before=None,
                                        target=("task", selected[1]))  # fmt: skip
    assert task_audits == []  # one record for the operation, not one per task


async def test_retry_resolve_priority_and_run_time_in_bulk(node: Node) -> None:
    bulk = tasks_bulk(node)
    waiting = await submit(node, 3)
    later = await submit(node, 2, delay_ms=60_000)

    async def apply(action: str, ids: list[str], **params: object) -> tuple[int, int]:
        what = TaskFilter(TaskSelection(ids=tuple(ids)))
        op = await bulk.start(SCOPE, action=action, what=what, filter_doc={}, params=params,
                              actor=ACTOR)  # fmt: skip
        await run_out(bulk)
        op = await bulk.get(SCOPE, op.id)
        return op.done, op.skipped

    assert await apply("set_priority", waiting + later, priority=9) == (5, 0)
    assert {(await node.tasks.get(SCOPE, i)).priority for i in waiting + later} == {9}
    moved = node.clock.now() + timedelta(hours=2)
    assert await apply("move_run_at", waiting + later, run_at=moved.isoformat()) == (2, 3)
    assert {(await node.tasks.get(SCOPE, i)).run_at for i in later} == {moved}
    assert await apply("cancel", waiting) == (3, 0)
    assert await apply("retry", waiting + later) == (3, 2)  # scheduled ones: nothing to retry
    assert {(await node.tasks.get(SCOPE, i)).state for i in waiting} == {"pending"}
    assert await apply("resolve", waiting, outcome="succeeded", result={"ok": 1}) == (0, 3)


async def test_a_cancelled_operation_stops_and_filters_are_bounded(node: Node) -> None:
    bulk = tasks_bulk(node, max_targets=10, batch=4)
    ids = await submit(node, 10)
    what = TaskFilter(TaskSelection(queue="mail"))
    op = await bulk.start(SCOPE, action="cancel", what=what, filter_doc={}, params={},
                          actor=ACTOR)  # fmt: skip
    assert await bulk.step() == 4
    stopped = await bulk.cancel(SCOPE, op.id, actor=ACTOR)
    assert (stopped.state, stopped.done) == ("cancelled", 4)
    assert await bulk.step() == 0
    states = [(await node.tasks.get(SCOPE, i)).state for i in ids]
    assert states.count("cancelled") == 4
    with pytest.raises(StateConflict):
        await bulk.cancel(SCOPE, op.id, actor=ACTOR)
    await submit(node, 1)
    with pytest.raises(InvalidRequest, match="more than 10"):
        await bulk.dry_run(SCOPE, what)
    assert (await bulk.dry_run(OTHER_TENANT, what)).matched == 0


class Breaking:
    """A kind whose action fails on the targets named ``bad`` (after writing nothing)."""

    actions = ("poke",)

    def __init__(self, batch: int | None, bad: set[str]) -> None:
        self.batch = batch
        self.bad = bad
        self.done: list[str] = []

    async def apply(
        self, tx: Tx, op: BulkRecord, items: Sequence[tuple[int, str]]
    ) -> tuple[list[Settled], None]:
        for _, target in items:
            if target in self.bad:
                raise InvalidRequest("this target cannot be poked")
        self.done += [target for _, target in items]
        return [Settled(seq, "done", None) for seq, _ in items], None


async def test_a_failing_batch_never_holds_up_the_other_operations(node: Node) -> None:
    ids = await submit(node, 6)
    what = TaskFilter(TaskSelection(ids=tuple(ids)))
    one_by_one = Breaking(1, {sorted(ids)[2]})
    whole = Breaking(None, {sorted(ids)[0]})
    bulk = BulkService(node.db, node.clock, node.audit_writer,
                       {"tasks": TaskBulk(node.clock)}, batch=4)  # fmt: skip

    bulk.register("tasks", whole)
    broken = await bulk.start(SCOPE, action="poke", what=what, filter_doc={}, params={},
                              actor=ACTOR)  # fmt: skip
    bulk.register("tasks", one_by_one)
    # The first operation's kind is now the one-by-one kind: make a second operation of it.
    later = await bulk.start(SCOPE, action="poke", what=what, filter_doc={}, params={},
                             actor=ACTOR)  # fmt: skip
    bulk.register("tasks", whole)
    assert await bulk.step() == 1  # the whole batch of the first fails: the operation fails
    failed = await bulk.get(SCOPE, broken.id)
    assert (failed.state, failed.done) == ("failed", 0)
    assert failed.skipped_reasons == {"batch_failed:invalid_request": 4}
    bulk.register("tasks", one_by_one)
    while await bulk.step():
        pass
    finished = await bulk.get(SCOPE, later.id)
    assert (finished.state, finished.done, finished.failed) == ("completed", 5, 1)
    items = await bulk.items(SCOPE, later.id, after=-1, limit=10)
    assert [(i.target_id, i.reason) for i in items if i.state == "failed"] == [
        (sorted(ids)[2], "invalid_request")
    ]
