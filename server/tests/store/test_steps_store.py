"""Conformance: the step executions' store methods, on every dialect."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.store import Database, Tx
from orbit_server.store import steps as step_store
from orbit_server.weave.model import StepExecution
from orbit_server.weave.states import StepState

St = StepState


def step(
    at: datetime, key: str, seq: int, state: StepState = St.SUCCEEDED, *, workflow: str = "wf_1",
    **fields: object,
) -> StepExecution:  # fmt: skip
    ended = at if state in (St.SUCCEEDED, St.FAILED, St.SKIPPED) else None
    values: dict[str, object] = {
        "workflow_id": workflow, "key": key, "seq": seq, "step": key.split("[", maxsplit=1)[0],
        "kind": "task", "state": state, "parent_key": None, "branch": None, "item": None,
        "round": None, "task_id": None, "tries": 0, "input": {"n": seq}, "output": None,
        "error": None, "progress": None, "followed": True, "due_at": None, "wake_at": None,
        "started_at": at, "ended_at": ended, "updated_at": at,
    }  # fmt: skip
    values.update(fields)
    return StepExecution(**values)  # type: ignore[arg-type]


def keys(steps: list[StepExecution]) -> list[str]:
    return [s.key for s in steps]


@pytest.mark.covers(
    "workflow_steps_insert", "workflow_step_get", "workflow_steps_get_many", "workflow_step_items",
    "workflow_step_set_items", "workflow_steps_list", "workflow_steps_main",
    "workflow_steps_in_states", "workflow_steps_count_in_state", "workflow_step_outputs",
    "workflow_steps_unfollowed",
)  # fmt: skip
async def test_executions_are_read_by_key_order_state_and_map(
    db: Database, clock: FakeClock
) -> None:
    at = clock.now()
    rows = [
        step(at, "a", 1, output={"sent": True}, task_id="t_a", tries=1),
        step(at, "m", 2, St.RUNNING, kind="map"),
        step(at, "m[1]", 3, parent_key="m", item=1, output="x1", followed=False),
        step(at, "m[0]", 4, parent_key="m", item=0, output="x0"),
        step(at, "p", 5, St.WAITING, kind="poll", progress={"round": 1}),
        step(at, "p#1", 6, St.FAILED, round=1, error={"message": "not yet"}, followed=False),
        step(at, "b", 7, St.SKIPPED, branch="left", followed=False),
        step(at, "x", 1, workflow="wf_2"),
    ]

    async def write(tx: Tx) -> None:
        await step_store.workflow_steps_insert(tx, rows, {("wf_1", "m"): [3, 4]})
        await step_store.workflow_steps_insert(tx, [])
        await step_store.workflow_step_set_items(tx, "wf_1", "a", ["late"])

    await db.run(write)

    async def read(tx: Tx) -> tuple[object, ...]:
        wanted = [("wf_1", "m"), ("wf_2", "x"), ("wf_1", "none")]
        return (
            await step_store.workflow_step_get(tx, "wf_1", "a"),
            await step_store.workflow_step_get(tx, "wf_1", "none"),
            sorted(keys(await step_store.workflow_steps_get_many(tx, wanted))),
            await step_store.workflow_steps_get_many(tx, []),
            await step_store.workflow_step_items(tx, "wf_1", "m"),
            await step_store.workflow_step_items(tx, "wf_1", "a"),
            await step_store.workflow_step_items(tx, "wf_1", "p"),
            keys(await step_store.workflow_steps_list(tx, "wf_1", after=0, limit=3)),
            keys(await step_store.workflow_steps_list(tx, "wf_1", after=3, limit=10)),
            keys(await step_store.workflow_steps_main(tx, "wf_1", limit=3)),
            keys(await step_store.workflow_steps_in_states(tx, ["wf_1"], ["waiting", "running"])),
            [
                (s.workflow_id, s.key)
                for s in await step_store.workflow_steps_in_states(
                    tx, ["wf_2", "wf_1", "wf_3"], ["succeeded", "running"]
                )
            ],
            await step_store.workflow_steps_count_in_state(tx, "wf_1", "succeeded"),
            await step_store.workflow_steps_count_in_state(tx, "wf_1", "cancelled"),
            await step_store.workflow_step_outputs(tx, "wf_1", "m"),
            keys(await step_store.workflow_steps_unfollowed(tx, "wf_1")),
        )

    assert await db.read(read) == (
        rows[0], None, ["m", "x"], [], [3, 4], ["late"], [],
        ["a", "m", "m[1]"], ["m[0]", "p", "p#1", "b"],
        ["m", "p", "b"],  # no map items, no poll rounds
        ["m", "p"],
        [("wf_1", "a"), ("wf_1", "m"), ("wf_1", "m[1]"), ("wf_1", "m[0]"), ("wf_2", "x")],
        3, 0, ["x0", "x1"],
        ["m[1]", "p#1", "b"],  # ended and not followed
    )  # fmt: skip


@pytest.mark.covers(
    "workflow_steps_update_many", "workflow_steps_due", "workflow_steps_next_wake",
    "workflow_steps_rearm", "workflow_steps_delete_some",
)  # fmt: skip
async def test_waits_come_due_are_parked_and_rearmed_and_steps_go_in_parts(
    db: Database, clock: FakeClock
) -> None:
    at = clock.now()
    soon, later = at + timedelta(minutes=1), at + timedelta(minutes=5)
    rows = [
        step(at, "w1", 1, St.WAITING, due_at=later, wake_at=later),
        step(at, "w2", 2, St.WAITING, due_at=soon, wake_at=soon),
        step(at, "w3", 1, St.WAITING, workflow="wf_2", due_at=soon, wake_at=soon),
        step(at, "a", 3),
    ]
    await db.run(lambda tx: step_store.workflow_steps_insert(tx, rows))

    async def due(tx: Tx) -> tuple[object, ...]:
        return (
            sorted(await step_store.workflow_steps_due(tx, soon, limit=10)),
            await step_store.workflow_steps_due(tx, later, limit=1),
            await step_store.workflow_steps_next_wake(tx),
        )

    first, one, wake = await db.read(due)
    assert first == [("wf_1", "w2"), ("wf_2", "w3")]
    assert one in ([("wf_1", "w2")], [("wf_2", "w3")]) and wake == soon  # the longest due first
    changed = dataclasses.replace(
        rows[1], state=St.SUCCEEDED, output={"ok": 1}, tries=2, task_id="t_w2",
        progress={"p": 1}, followed=False, due_at=None, wake_at=None, ended_at=soon,
        updated_at=soon,
    )  # fmt: skip
    parked = dataclasses.replace(rows[0], wake_at=None, error={"message": "paused"})

    async def update(tx: Tx) -> None:
        await step_store.workflow_steps_update_many(tx, [changed, parked])
        await step_store.workflow_steps_update_many(tx, [])

    await db.run(update)
    assert await db.read(lambda tx: step_store.workflow_step_get(tx, "wf_1", "w2")) == changed
    assert await db.read(lambda tx: step_store.workflow_step_get(tx, "wf_1", "w1")) == parked
    assert await db.read(lambda tx: step_store.workflow_steps_due(tx, later, limit=10)) == [
        ("wf_2", "w3"),
    ]  # fmt: skip
    assert await db.run(lambda tx: step_store.workflow_steps_rearm(tx, "wf_1")) == 1  # w1 only
    assert await db.read(lambda tx: step_store.workflow_steps_due(tx, later, limit=10)) == [
        ("wf_2", "w3"), ("wf_1", "w1"),
    ]  # fmt: skip

    async def delete(tx: Tx) -> list[int]:
        return [await step_store.workflow_steps_delete_some(tx, "wf_1", limit=2) for _ in "abc"]

    assert await db.run(delete) == [2, 1, 0]
    assert await db.read(step_store.workflow_steps_next_wake) == soon  # wf_2's
    await db.run(lambda tx: step_store.workflow_steps_delete_some(tx, "wf_2", limit=5))
    assert await db.read(step_store.workflow_steps_next_wake) is None
