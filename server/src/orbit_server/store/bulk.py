"""Store methods of bulk operations (decision 0025): the operation row, its frozen selection
(one item per target, settled once), and the selection's reads of tasks."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from orbit_server.pulse.model import (
    BulkItem,
    BulkRecord,
    SelectedTask,
    Settled,
    Task,
    TaskSelection,
)
from orbit_server.pulse.states import TaskState
from orbit_server.scope import Scope
from orbit_server.store.base import Row, Tx, chunks, scope_params
from orbit_server.store.tasks import task_from_row

RUNNING = "running"
PENDING = "pending"
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)


def _record(row: Row) -> BulkRecord:
    return BulkRecord(
        id=str(row["id"]),
        scope=Scope(str(row["tenant"]), str(row["environment"])),
        kind=str(row["kind"]),
        action=str(row["action"]),
        filter=msgspec.json.decode(row["filter"]),
        params=msgspec.json.decode(row["params"]),
        state=str(row["state"]),
        matched=int(row["matched"]),
        done=int(row["done"]),
        skipped=int(row["skipped"]),
        failed=int(row["failed"]),
        skipped_reasons=msgspec.json.decode(row["skipped_reasons"]),
        created_by=str(row["created_by"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        finished_at=row["finished_at"],
    )


async def bulk_insert(
    tx: Tx,
    *,
    op_id: str,
    scope: Scope,
    kind: str,
    action: str,
    filter_: dict[str, Any],
    params: dict[str, Any],
    targets: Sequence[str],
    created_by: str,
    now: datetime,
) -> None:
    """A running operation over ``targets``, frozen now: one pending item each, in order."""
    await tx.execute(
        "bulk_insert",
        {
            **scope_params(scope),
            "id": op_id,
            "kind": kind,
            "action": action,
            "filter": msgspec.json.encode(filter_).decode(),
            "params": msgspec.json.encode(params).decode(),
            "state": RUNNING if targets else "completed",
            "matched": len(targets),
            "created_by": created_by,
            "now": now,
            "finished_at": None if targets else now,
        },
    )
    for part in chunks(list(enumerate(targets)), 1000):
        await tx.execute_many(
            "bulk_item_insert",
            [
                {"operation_id": op_id, "seq": seq, "target_id": target, "state": PENDING}
                for seq, target in part
            ],
        )


async def bulk_get(tx: Tx, scope: Scope, op_id: str, *, lock: bool = False) -> BulkRecord | None:
    row = await tx.fetch_one(
        "bulk_lock" if lock else "bulk_get", {**scope_params(scope), "id": op_id}
    )
    return None if row is None else _record(row)


async def bulk_lock_by_id(tx: Tx, op_id: str) -> BulkRecord | None:
    """An operation of any scope, locked (its failed batch is being recorded)."""
    row = await tx.fetch_one("bulk_lock_by_id", {"id": op_id})
    return None if row is None else _record(row)


async def bulk_list(tx: Tx, scope: Scope, *, before: str, limit: int) -> list[BulkRecord]:
    rows = await tx.fetch_all(
        "bulk_list", {**scope_params(scope), "before": before, "limit": limit}
    )
    return [_record(r) for r in rows]


async def bulk_next_running(tx: Tx) -> BulkRecord | None:
    """The oldest running operation, locked; one that another transaction steps is passed."""
    row = await tx.fetch_one("bulk_next_running", {"running": RUNNING})
    return None if row is None else _record(row)


async def bulk_items_pending(tx: Tx, op_id: str, *, limit: int) -> list[tuple[int, str]]:
    rows = await tx.fetch_all(
        "bulk_items_pending", {"id": op_id, "pending": PENDING, "limit": limit}
    )
    return [(int(r["seq"]), str(r["target_id"])) for r in rows]


async def bulk_items_settle(tx: Tx, op_id: str, settled: Sequence[Settled]) -> None:
    if settled:
        await tx.execute_many(
            "bulk_item_settle",
            [
                {"operation_id": op_id, "seq": s.seq, "state": s.state, "reason": s.reason,
                 "pending": PENDING}
                for s in settled
            ],
        )  # fmt: skip


async def bulk_progress(
    tx: Tx,
    op: BulkRecord,
    *,
    done: int,
    skipped: int,
    failed: int,
    skipped_reasons: dict[str, int],
    state: str,
    now: datetime,
) -> None:
    """Add a step's counts to ``op`` and set its state (finished unless ``running``)."""
    await tx.execute(
        "bulk_progress",
        {
            "id": op.id,
            "done": done,
            "skipped": skipped,
            "failed": failed,
            "skipped_reasons": msgspec.json.encode(skipped_reasons).decode(),
            "state": state,
            "now": now,
            "finished_at": None if state == RUNNING else now,
        },
    )


async def bulk_items_list(tx: Tx, op_id: str, *, after: int, limit: int) -> list[BulkItem]:
    rows = await tx.fetch_all("bulk_items_list", {"id": op_id, "after": after, "limit": limit})
    return [
        BulkItem(int(r["seq"]), str(r["target_id"]), str(r["state"]), r["reason"]) for r in rows
    ]


async def tasks_select(
    tx: Tx, scope: Scope, selection: TaskSelection, *, after: str, limit: int
) -> list[SelectedTask]:
    """A page of the tasks ``selection`` matches, by id after ``after``."""
    s = selection
    rows = await tx.fetch_all(
        "tasks_select",
        {
            **scope_params(scope),
            "after": after,
            "limit": limit,
            "any_queue": 1 if s.queue is None else 0,
            "queue": s.queue or "",
            "any_state": 1 if s.states is None else 0,
            "states": list(s.states or ("",)),
            "any_type": 1 if s.type is None else 0,
            "type": s.type or "",
            "any_ids": 1 if s.ids is None else 0,
            "ids": list(s.ids or ("",)),
            "created_from": s.created_from or EARLIEST,
            "created_to": s.created_to or LATEST,
            "any_finished": 1 if s.finished_from is None and s.finished_to is None else 0,
            "finished_from": s.finished_from or EARLIEST,
            "finished_to": s.finished_to or LATEST,
        },
    )
    found = []
    for r in rows:
        error = msgspec.json.decode(r["error"]) if r["error"] else None
        found.append(
            SelectedTask(
                id=str(r["id"]),
                state=str(r["state"]),
                labels=msgspec.json.decode(r["labels"]) if r["labels"] else {},
                error_code=str(error.get("code")) if isinstance(error, dict) else None,
            )
        )
    return found


async def tasks_lock_batch(tx: Tx, scope: Scope, task_ids: Sequence[str]) -> dict[str, Task]:
    """Whole rows of these tasks of ``scope``, locked (other scopes' ids are left alone)."""
    if not task_ids:
        return {}
    rows = await tx.fetch_all(
        "bulk_tasks_lock", {**scope_params(scope), "task_ids": sorted(set(task_ids))}
    )
    return {str(r["id"]): task_from_row(r) for r in rows}


async def task_set_priority(tx: Tx, task_id: str, priority: int, now: datetime) -> bool:
    """A waiting task's new priority (False: it is no longer scheduled or pending)."""
    changed = await tx.execute(
        "task_set_priority",
        {
            "id": task_id,
            "priority": priority,
            "now": now,
            "states": [TaskState.SCHEDULED, TaskState.PENDING],
        },
    )
    if changed:
        await tx.execute("ready_set_priority", {"id": task_id, "priority": priority})
    return changed == 1


async def task_move_run_at(tx: Tx, task_id: str, run_at: datetime, now: datetime) -> bool:
    """A scheduled task's new run time (False: it is not scheduled)."""
    return (
        await tx.execute(
            "task_move_run_at",
            {"id": task_id, "run_at": run_at, "now": now, "scheduled": TaskState.SCHEDULED},
        )
        == 1
    )


async def workflows_select(
    tx: Tx,
    scope: Scope,
    *,
    definition: str | None = None,
    states: Sequence[str] | None = None,
    ids: Sequence[str] | None = None,
    created_from: datetime | None = None,
    created_to: datetime | None = None,
    after: str,
    limit: int,
) -> list[str]:
    """A page of the ids of the workflows these filters match (None: any), after ``after``."""
    rows = await tx.fetch_all(
        "workflows_select",
        {
            **scope_params(scope),
            "after": after,
            "limit": limit,
            "any_definition": 1 if definition is None else 0,
            "definition": definition or "",
            "any_state": 1 if states is None else 0,
            "states": list(states or ("",)),
            "any_ids": 1 if ids is None else 0,
            "ids": list(ids or ("",)),
            "created_from": created_from or EARLIEST,
            "created_to": created_to or LATEST,
        },
    )
    return [str(r["id"]) for r in rows]


async def bulk_prune(tx: Tx, before: datetime, *, limit: int) -> int:
    """Forget the oldest operation that finished before ``before``: up to ``limit`` of its
    items, then (once none is left) the operation. Answers the rows deleted."""
    row = await tx.fetch_one("bulk_finished_before", {"running": RUNNING, "before": before})
    if row is None:
        return 0
    op_id = str(row["id"])
    first = await tx.fetch_one("bulk_items_first_seq", {"id": op_id})
    if first is not None and first["seq"] is not None:
        below = int(first["seq"]) + limit
        return await tx.execute("bulk_items_delete_below", {"id": op_id, "below": below})
    return await tx.execute("bulk_delete", {"id": op_id})
