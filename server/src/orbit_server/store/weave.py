"""Store methods of Weave (decision 0015): definition versions, instances, step executions and
signals."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from orbit_server.scope import Scope
from orbit_server.store.base import Row, Tx, chunks, json_table_rows
from orbit_server.store.base import json_or_none as _json
from orbit_server.weave.model import Signal, StepExecution, StoredDefinition, Workflow
from orbit_server.weave.states import StepState, WorkflowState


def _unjson(text: Any) -> Any:
    return None if text is None else msgspec.json.decode(str(text))


def _scope(row: Row) -> Scope:
    return Scope(str(row["tenant"]), str(row["environment"]))


def _scoped(scope: Scope) -> dict[str, str]:
    return {"tenant": scope.tenant, "environment": scope.environment}


# -- definitions ------------------------------------------------------------------------------


def _definition(row: Row) -> StoredDefinition:
    return StoredDefinition(
        scope=_scope(row),
        name=str(row["name"]),
        version=str(row["version"]),
        digest=str(row["digest"]),
        body=_unjson(row["body"]) if "body" in row else None,
        created_at=row["created_at"],
    )


async def workflow_definition_insert(tx: Tx, record: StoredDefinition) -> None:
    """Raises ``DuplicateKey`` when the version exists."""
    await tx.execute(
        "workflow_definition_insert",
        {**_scoped(record.scope), "name": record.name, "version": record.version,
         "digest": record.digest, "body": _json(record.body), "created_at": record.created_at},
    )  # fmt: skip


async def workflow_definition_get(
    tx: Tx, scope: Scope, name: str, version: str
) -> StoredDefinition | None:
    row = await tx.fetch_one(
        "workflow_definition_get", {**_scoped(scope), "name": name, "version": version}
    )
    return None if row is None else _definition(row)


async def workflow_definition_latest_version(tx: Tx, scope: Scope, name: str) -> str | None:
    """The version of ``name`` published last (an index-only read)."""
    row = await tx.fetch_one("workflow_definition_latest_version", {**_scoped(scope), "name": name})
    return None if row is None else str(row["version"])


async def workflow_definitions_list(
    tx: Tx, scope: Scope, *, name: str | None, after: tuple[str, str] | None, limit: int
) -> list[StoredDefinition]:
    """Versions by name then version (all names, or one name's)."""
    if name is not None:
        rows = await tx.fetch_all(
            "workflow_definition_versions",
            {**_scoped(scope), "name": name, "after": after[1] if after else "", "limit": limit},
        )
    else:
        after_name, after_version = after or ("", "")
        rows = await tx.fetch_all(
            "workflow_definitions_list",
            {**_scoped(scope), "after_name": after_name, "after_version": after_version,
             "limit": limit},
        )  # fmt: skip
    return [_definition(r) for r in rows]


# -- instances --------------------------------------------------------------------------------


def _workflow(row: Row) -> Workflow:
    return Workflow(
        id=str(row["id"]),
        scope=_scope(row),
        definition=str(row["definition"]),
        version=str(row["version"]),
        state=WorkflowState(row["state"]),
        input=_unjson(row["input"]),
        output=_unjson(row["output"]),
        error=_unjson(row["error"]),
        context=_unjson(row["context"]),
        control_version=int(row["control_version"]),
        gate_id=str(row["gate_id"]),
        idempotency_key=row["idempotency_key"],
        request_hash=row["request_hash"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        finished_at=row["finished_at"],
    )


def _workflow_params(w: Workflow) -> dict[str, Any]:
    return {
        "id": w.id, **_scoped(w.scope), "definition": w.definition, "version": w.version,
        "state": w.state, "input": msgspec.json.encode(w.input).decode(), "output": _json(w.output),
        "error": _json(w.error), "context": _json(w.context),
        "control_version": w.control_version, "gate_id": w.gate_id,
        "idempotency_key": w.idempotency_key, "request_hash": w.request_hash,
        "created_at": w.created_at, "updated_at": w.updated_at, "finished_at": w.finished_at,
    }  # fmt: skip


async def workflow_insert(tx: Tx, workflow: Workflow) -> None:
    """Raises ``DuplicateKey`` when the scope has an instance with the idempotency key."""
    await tx.execute("workflow_insert", _workflow_params(workflow))


async def workflow_get(tx: Tx, scope: Scope, workflow_id: str) -> Workflow | None:
    row = await tx.fetch_one("workflow_get", {**_scoped(scope), "id": workflow_id})
    return None if row is None else _workflow(row)


async def workflow_lock(tx: Tx, workflow_id: str) -> Workflow | None:
    """The instance, its row held until the transaction ends: every change of an instance
    and of its steps takes this lock first."""
    row = await tx.fetch_one("workflow_lock", {"id": workflow_id})
    return None if row is None else _workflow(row)


async def workflows_lock_many(tx: Tx, workflow_ids: Sequence[str]) -> list[Workflow]:
    """Several instances, locked in id order (one order for every batch: no deadlock)."""
    if not workflow_ids:
        return []
    rows = await tx.fetch_all("workflows_lock_many", {"ids": sorted(workflow_ids)})
    return [_workflow(r) for r in rows]


async def workflow_get_by_idempotency_key(tx: Tx, scope: Scope, key: str) -> Workflow | None:
    row = await tx.fetch_one(
        "workflow_get_by_idempotency_key", {**_scoped(scope), "idempotency_key": key}
    )
    return None if row is None else _workflow(row)


WORKFLOW_CHANGES = ("id", "state", "output", "error", "context", "control_version",
                    "updated_at", "finished_at")  # fmt: skip


async def workflows_update_many(tx: Tx, workflows: Sequence[Workflow]) -> None:
    """Write the changeable columns of instances (by id): one statement on MySQL/MariaDB."""
    rows = [{k: p[k] for k in WORKFLOW_CHANGES} for p in map(_workflow_params, workflows)]
    await _update_many(tx, "workflows_update_many", rows)


async def _update_many(tx: Tx, query: str, rows: list[dict[str, Any]]) -> None:
    """One ``UPDATE … JOIN JSON_TABLE`` on MySQL/MariaDB; the row's update once per row on
    SQLite."""
    if not rows:
        return
    if tx.dialect == "mysql":
        await tx.execute(query, {"rows_json": json_table_rows(rows)})
    else:
        await tx.execute_many(query, rows)


async def workflows_list(
    tx: Tx,
    scope: Scope,
    *,
    definition: str | None,
    state: str | None,
    before: str | None,
    limit: int,
) -> list[Workflow]:
    """Newest first; of a definition, in a state, both, or all."""
    params: dict[str, Any] = {**_scoped(scope), "before": before or "~", "limit": limit}
    if definition is not None and state is not None:
        rows = await tx.fetch_all(
            "workflows_list_by_definition_state", {**params, "definition": definition,
                                                   "state": state}
        )  # fmt: skip
    elif definition is not None:
        rows = await tx.fetch_all(
            "workflows_list_by_definition", {**params, "definition": definition}
        )
    elif state is not None:
        rows = await tx.fetch_all("workflows_list_by_state", {**params, "state": state})
    else:
        rows = await tx.fetch_all("workflows_list", params)
    return [_workflow(r) for r in rows]


# -- step executions --------------------------------------------------------------------------


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
        input=_unjson(row["input"]),
        output=_unjson(row["output"]),
        error=_unjson(row["error"]),
        progress=_unjson(row["progress"]),
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
    items = None if row is None else _unjson(row["items"])
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
    """Write the changeable columns of step executions (by key): one statement on
    MySQL/MariaDB."""
    rows = [{k: p[k] for k in STEP_CHANGES} for p in map(_step_params, steps)]
    await _update_many(tx, "workflow_steps_update_many", rows)


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
    return [_unjson(r["output"]) for r in rows]


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


# -- signals ----------------------------------------------------------------------------------


def _signal(row: Row) -> Signal:
    return Signal(
        id=str(row["id"]),
        workflow_id=str(row["workflow_id"]),
        name=str(row["name"]),
        payload=_unjson(row["payload"]),
        idempotency_key=row["idempotency_key"],
        state=str(row["state"]),
        step_key=row["step_key"],
        created_at=row["created_at"],
        delivered_at=row["delivered_at"],
    )


async def workflow_signal_insert(tx: Tx, signal: Signal) -> None:
    """Raises ``DuplicateKey`` when the instance has a signal with the idempotency key."""
    await tx.execute(
        "workflow_signal_insert",
        {"id": signal.id, "workflow_id": signal.workflow_id, "name": signal.name,
         "payload": _json(signal.payload), "idempotency_key": signal.idempotency_key,
         "state": signal.state, "step_key": signal.step_key, "created_at": signal.created_at,
         "delivered_at": signal.delivered_at},
    )  # fmt: skip


async def workflow_signal_get_by_key(tx: Tx, workflow_id: str, key: str) -> Signal | None:
    row = await tx.fetch_one(
        "workflow_signal_get_by_key", {"workflow_id": workflow_id, "idempotency_key": key}
    )
    return None if row is None else _signal(row)


async def workflow_signal_oldest_pending(tx: Tx, workflow_id: str, name: str) -> Signal | None:
    row = await tx.fetch_one(
        "workflow_signal_oldest_pending", {"workflow_id": workflow_id, "name": name}
    )
    return None if row is None else _signal(row)


async def workflow_signal_deliver(tx: Tx, signal_id: str, step_key: str, now: datetime) -> bool:
    return (
        await tx.execute(
            "workflow_signal_deliver", {"id": signal_id, "step_key": step_key, "now": now}
        )
        == 1
    )


async def workflow_signals_pending(tx: Tx, workflow_id: str, *, limit: int) -> list[Signal]:
    rows = await tx.fetch_all(
        "workflow_signals_pending", {"workflow_id": workflow_id, "limit": limit}
    )
    return [_signal(r) for r in rows]


# -- retention --------------------------------------------------------------------------------


async def workflows_finished_before(
    tx: Tx, before: datetime, *, limit: int
) -> list[tuple[str, str]]:
    """(instance, its gate) of up to ``limit`` instances finished before ``before``."""
    rows = await tx.fetch_all("workflows_finished_before", {"before": before, "limit": limit})
    return [(str(r["id"]), str(r["gate_id"])) for r in rows]


async def workflow_steps_delete_some(tx: Tx, workflow_id: str, *, limit: int) -> int:
    return await tx.execute(
        "workflow_steps_delete_some", {"workflow_id": workflow_id, "limit": limit}
    )


async def workflow_delete(tx: Tx, workflow_id: str) -> None:
    """The instance's row and its signals (its steps go first, in bounded parts)."""
    await tx.execute("workflow_signals_delete", {"workflow_id": workflow_id})
    await tx.execute("workflow_delete", {"id": workflow_id})
