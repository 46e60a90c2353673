"""Store methods of step executions (decision 0015): one row per run of a step of an
instance — a map's items and a poll's rounds each have their own — and the waits due to wake."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from orbit_server.store.base import Row, Tx, chunks, json_table_rows, json_value
from orbit_server.store.base import json_or_none as _json
from orbit_server.weave.model import StepExecution
from orbit_server.weave.states import StepState


def _step(row: Row) -> StepExecution:
    return StepExecution(
        workflow_id=str(row["workflow_id"]),
        key=str(row["step_key"]),
        seq=int(row["seq"]),
        step=str(row["step"]),
        kind=str(row["kind"]),
        state=StepState(row["state"]),
        parent_key=row["parent_key"],
        branch=row["branch"],
        item=None if row["item"] is None else int(row["item"]),
        round=None if row["round"] is None else int(row["round"]),
        task_id=row["task_id"],
        tries=int(row["tries"]),
        input=json_value(row["input"]),
        output=json_value(row["output"]),
        error=json_value(row["error"]),
        progress=json_value(row["progress"]),
        followed=bool(row["followed"]),
        due_at=row["due_at"],
        wake_at=row["wake_at"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        updated_at=row["updated_at"],
    )


def _step_params(s: StepExecution) -> dict[str, Any]:
    return {
        "workflow_id": s.workflow_id, "step_key": s.key, "seq": s.seq, "step": s.step,
        "kind": s.kind, "state": s.state, "parent_key": s.parent_key, "branch": s.branch,
        "item": s.item, "round": s.round, "task_id": s.task_id, "tries": s.tries,
        "input": _json(s.input), "output": _json(s.output), "error": _json(s.error),
        "progress": _json(s.progress), "followed": 1 if s.followed else 0, "due_at": s.due_at,
        "wake_at": s.wake_at, "started_at": s.started_at, "ended_at": s.ended_at,
        "updated_at": s.updated_at,
    }  # fmt: skip


async def workflow_steps_insert(
    tx: Tx, steps: Sequence[StepExecution], items: dict[tuple[str, str], Any] | None = None
) -> None:
    """New step executions in one statement; ``items`` gives a map step's item list by
    (instance, key)."""
    if not steps:
        return
    rows = []
    for s in steps:
        params = _step_params(s)
        found = None if items is None else items.get((s.workflow_id, s.key))
        params["items"] = None if found is None else _json(found)
        rows.append(params)
    await tx.execute_many("workflow_step_insert", rows)


async def workflow_step_get(tx: Tx, workflow_id: str, key: str) -> StepExecution | None:
    row = await tx.fetch_one("workflow_step_get", {"workflow_id": workflow_id, "step_key": key})
    return None if row is None else _step(row)


async def workflow_steps_get_many(tx: Tx, keys: Sequence[tuple[str, str]]) -> list[StepExecution]:
    """Step executions by (instance, key), in one statement."""
    if not keys:
        return []
    rows = await tx.fetch_union(
        "workflow_step_get", [{"workflow_id": w, "step_key": k} for w, k in keys]
    )
    return [_step(r) for r in rows]


async def workflow_step_items(tx: Tx, workflow_id: str, key: str) -> list[Any]:
    """A map step's items, as evaluated when it started."""
    row = await tx.fetch_one("workflow_step_items", {"workflow_id": workflow_id, "step_key": key})
    items = None if row is None else json_value(row["items"])
    return items if isinstance(items, list) else []


async def workflow_step_set_items(tx: Tx, workflow_id: str, key: str, items: list[Any]) -> None:
    """Store a map's items on its existing row (a map begun after waiting)."""
    await tx.execute(
        "workflow_step_set_items",
        {"workflow_id": workflow_id, "step_key": key, "items": _json(items)},
    )


async def workflow_steps_unfollowed(tx: Tx, workflow_id: str) -> list[StepExecution]:
    """Ended executions not followed yet (recorded while the instance was paused), in the
    order they began."""
    rows = await tx.fetch_all("workflow_steps_unfollowed", {"workflow_id": workflow_id})
    return sorted((_step(r) for r in rows), key=lambda r: r.seq)


STEP_CHANGES = ("workflow_id", "step_key", "state", "task_id", "tries", "output", "error",
                "progress", "followed", "due_at", "wake_at", "ended_at", "updated_at")  # fmt: skip


async def workflow_steps_update_many(tx: Tx, steps: Sequence[StepExecution]) -> None:
    """Write the changeable columns of step executions (by key): one ``UPDATE … JOIN
    JSON_TABLE`` on MySQL/MariaDB, the row's update once per row on SQLite."""
    rows = [{k: p[k] for k in STEP_CHANGES} for p in map(_step_params, steps)]
    if not rows:
        return
    if tx.dialect == "mysql":
        await tx.execute("workflow_steps_update_many", {"rows_json": json_table_rows(rows)})
    else:
        await tx.execute_many("workflow_steps_update_many", rows)


async def workflow_steps_list(
    tx: Tx, workflow_id: str, *, after: int, limit: int
) -> list[StepExecution]:
    """In the order they were created."""
    rows = await tx.fetch_all(
        "workflow_steps_list", {"workflow_id": workflow_id, "after": after, "limit": limit}
    )
    return [_step(r) for r in rows]


async def workflow_steps_main(tx: Tx, workflow_id: str, *, limit: int) -> list[StepExecution]:
    """The newest ``limit`` executions that are steps (no map items, no poll rounds), in
    the order they began."""
    rows = await tx.fetch_all("workflow_steps_main", {"workflow_id": workflow_id, "limit": limit})
    return [_step(r) for r in rows][::-1]


async def workflow_steps_in_states(
    tx: Tx, workflow_ids: Sequence[str], states: Sequence[str]
) -> list[StepExecution]:
    """The executions of the instances in ``states``, by instance, each in the order they
    began: one statement per 200 instances."""
    found: list[StepExecution] = []
    for part in chunks(list(dict.fromkeys(workflow_ids)), 200):
        rows = await tx.fetch_all(
            "workflow_steps_in_states", {"workflow_ids": part, "states": list(states)}
        )
        found += (_step(r) for r in rows)
    return sorted(found, key=lambda s: (s.workflow_id, s.seq))


async def workflow_steps_count_in_state(tx: Tx, workflow_id: str, state: str) -> int:
    row = await tx.fetch_one(
        "workflow_steps_count_in_state", {"workflow_id": workflow_id, "state": state}
    )
    return 0 if row is None else int(row["n"])


async def workflow_step_outputs(tx: Tx, workflow_id: str, parent_key: str) -> list[Any]:
    """The outputs of a map's items, in item order."""
    rows = await tx.fetch_all(
        "workflow_step_outputs", {"workflow_id": workflow_id, "parent_key": parent_key}
    )
    return [json_value(r["output"]) for r in rows]


async def workflow_steps_due(tx: Tx, now: datetime, *, limit: int) -> list[tuple[str, str]]:
    """(instance, step key) of waits due at ``now``, the longest due first."""
    rows = await tx.fetch_all("workflow_steps_due", {"now": now, "limit": limit})
    return [(str(r["workflow_id"]), str(r["step_key"])) for r in rows]


async def workflow_steps_next_wake(tx: Tx) -> datetime | None:
    row = await tx.fetch_one("workflow_steps_next_wake", {})
    return None if row is None else row["wake_at"]


async def workflow_steps_rearm(tx: Tx, workflow_id: str) -> int:
    """Give the instance's parked waits their wake time again (after a resume)."""
    return await tx.execute("workflow_steps_rearm", {"workflow_id": workflow_id})


async def workflow_steps_delete_some(tx: Tx, workflow_id: str, *, limit: int) -> int:
    return await tx.execute(
        "workflow_steps_delete_some", {"workflow_id": workflow_id, "limit": limit}
    )
