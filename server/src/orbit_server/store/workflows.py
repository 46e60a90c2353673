"""Store methods of workflow instances (decision 0015): their rows, the lock every change of
an instance and of its steps takes first, their lists, and their retention."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from orbit_server.scope import Scope
from orbit_server.store.base import (
    Row,
    Tx,
    json_or_none,
    json_table_rows,
    json_value,
    row_scope,
    scope_params,
)
from orbit_server.weave.model import Workflow
from orbit_server.weave.states import WorkflowState


def _workflow(row: Row) -> Workflow:
    return Workflow(
        id=str(row["id"]),
        scope=row_scope(row),
        definition=str(row["definition"]),
        version=str(row["version"]),
        state=WorkflowState(row["state"]),
        input=json_value(row["input"]),
        output=json_value(row["output"]),
        error=json_value(row["error"]),
        context=json_value(row["context"]),
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
        "id": w.id, **scope_params(w.scope), "definition": w.definition, "version": w.version,
        "state": w.state, "input": msgspec.json.encode(w.input).decode(),
        "output": json_or_none(w.output), "error": json_or_none(w.error),
        "context": json_or_none(w.context), "control_version": w.control_version,
        "gate_id": w.gate_id, "idempotency_key": w.idempotency_key,
        "request_hash": w.request_hash, "created_at": w.created_at, "updated_at": w.updated_at,
        "finished_at": w.finished_at,
    }  # fmt: skip


async def workflow_insert(tx: Tx, workflow: Workflow) -> None:
    """Raises ``DuplicateKey`` when the scope has an instance with the idempotency key."""
    await tx.execute("workflow_insert", _workflow_params(workflow))


async def workflow_get(tx: Tx, scope: Scope, workflow_id: str) -> Workflow | None:
    row = await tx.fetch_one("workflow_get", {**scope_params(scope), "id": workflow_id})
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
        "workflow_get_by_idempotency_key", {**scope_params(scope), "idempotency_key": key}
    )
    return None if row is None else _workflow(row)


WORKFLOW_CHANGES = ("id", "state", "output", "error", "context", "control_version",
                    "updated_at", "finished_at")  # fmt: skip


async def workflows_update_many(tx: Tx, workflows: Sequence[Workflow]) -> None:
    """Write the changeable columns of instances (by id): one ``UPDATE … JOIN JSON_TABLE`` on
    MySQL/MariaDB, the row's update once per row on SQLite."""
    rows = [{k: p[k] for k in WORKFLOW_CHANGES} for p in map(_workflow_params, workflows)]
    if not rows:
        return
    if tx.dialect == "mysql":
        await tx.execute("workflows_update_many", {"rows_json": json_table_rows(rows)})
    else:
        await tx.execute_many("workflows_update_many", rows)


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
    params: dict[str, Any] = {**scope_params(scope), "before": before or "~", "limit": limit}
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


async def workflows_finished_before(
    tx: Tx, before: datetime, *, limit: int
) -> list[tuple[str, str]]:
    """(instance, its gate) of up to ``limit`` instances finished before ``before``."""
    rows = await tx.fetch_all("workflows_finished_before", {"before": before, "limit": limit})
    return [(str(r["id"]), str(r["gate_id"])) for r in rows]


async def workflow_delete(tx: Tx, workflow_id: str) -> None:
    """The instance's row (its steps and signals go first)."""
    await tx.execute("workflow_delete", {"id": workflow_id})
