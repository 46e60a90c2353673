"""Store methods of result events: one row per result a task reaches, numbered by the task's
event counter (decision 0019), until its owner's consumer has processed it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from orbit_server.pulse.model import ResultEvent
from orbit_server.pulse.states import TaskState
from orbit_server.store.base import Row, Tx, row_scope, scope_params


def task_event_params(event: ResultEvent) -> dict[str, Any]:
    """The parameters of ``task_event_insert`` for one event."""
    return {
        **scope_params(event.scope),
        "id": event.id,
        "task_id": event.task_id,
        "attempt": event.attempt,
        "seq": event.seq,
        "state": event.state,
        "owner_kind": event.owner_kind,
        "owner_id": event.owner_id,
        "created_at": event.created_at,
    }


def _events(rows: Sequence[Row]) -> list[ResultEvent]:
    return [
        ResultEvent(
            id=str(r["id"]),
            scope=row_scope(r),
            task_id=str(r["task_id"]),
            attempt=int(r["attempt"]),
            state=TaskState(r["state"]),
            owner_kind=r["owner_kind"],
            owner_id=r["owner_id"],
            created_at=r["created_at"],
            seq=int(r["seq"]),
        )
        for r in rows
    ]


async def task_events_insert_many(tx: Tx, events: Sequence[ResultEvent]) -> None:
    """Write result events of tasks whose counters the statement that moved them advanced
    already, in one statement (a deferred write: one that exists fails the unit)."""
    if events:
        tx.defer_many("task_event_insert", [task_event_params(e) for e in events])


async def task_event_insert_now(tx: Tx, event: ResultEvent) -> None:
    """Write one result event at once; ``DuplicateKey`` when it exists."""
    await tx.execute("task_event_insert", task_event_params(event))


async def task_event_list_pending(tx: Tx, *, limit: int, after: str = "") -> list[ResultEvent]:
    rows = await tx.fetch_all("task_event_list_pending", {"after": after, "limit": limit})
    return _events(rows)


async def task_event_list_pending_owned(
    tx: Tx, owner_kind: str, *, limit: int, after: str = ""
) -> list[ResultEvent]:
    """Unprocessed events of tasks owned by ``owner_kind``, oldest first."""
    rows = await tx.fetch_all(
        "task_event_list_pending_owned", {"owner_kind": owner_kind, "after": after, "limit": limit}
    )
    return _events(rows)


async def task_event_mark_processed(tx: Tx, event_id: str, now: datetime) -> bool:
    """Mark an event processed; False when it already was (a duplicate delivery)."""
    return await tx.execute("task_event_mark_processed", {"id": event_id, "now": now}) == 1


async def task_events_mark_processed_many(
    tx: Tx, event_ids: Sequence[str], now: datetime
) -> set[str]:
    """Mark the unprocessed of ``event_ids`` processed; answers those this call marked (the
    others were processed already). Their rows stay locked until the transaction ends."""
    if not event_ids:
        return set()
    rows = await tx.fetch_all("task_events_lock_unprocessed", {"ids": list(event_ids)})
    fresh = [str(r["id"]) for r in rows]
    if fresh:
        await tx.execute("task_events_mark_processed_many", {"ids": fresh, "now": now})
    return set(fresh)


async def task_events_delete_for_tasks(tx: Tx, task_ids: Sequence[str]) -> int:
    """Delete every event of these tasks (they are being pruned)."""
    return await tx.execute("events_delete_for_tasks", {"task_ids": list(task_ids)})


async def task_events_pending_owned_count(tx: Tx, owner_kind: str, *, most: int) -> int:
    """How many events of tasks owned by ``owner_kind`` wait to be processed, up to ``most``."""
    row = await tx.fetch_one(
        "task_events_pending_owned_count", {"owner_kind": owner_kind, "most": most}
    )
    return 0 if row is None else int(row["n"])
