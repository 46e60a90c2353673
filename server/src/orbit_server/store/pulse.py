"""Store methods for Pulse: queues, tasks, the claim range, attempts and result events."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import msgspec

from orbit_server.pulse.model import Attempt, Queue, ResultEvent, Task
from orbit_server.pulse.states import AttemptState, SideEffect, TaskState
from orbit_server.scope import Scope
from orbit_server.store.base import DuplicateKey, Row, Tx, chunks

LAST = "~"  # sorts after every id


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


def _unjson(text: str | None) -> Any:
    return None if text is None else msgspec.json.decode(text)


def _scope_params(scope: Scope) -> dict[str, Any]:
    return {"tenant": scope.tenant, "environment": scope.environment}


def queue_from_row(row: Row) -> Queue:
    return Queue(
        scope=Scope(str(row["tenant"]), str(row["environment"])),
        name=str(row["name"]),
        paused=bool(row["paused"]),
        concurrency_limit=row["concurrency_limit"],
        key_concurrency=int(row["key_concurrency"]),
        max_pending=row["max_pending"],
        pending=int(row["pending"]),
        active=int(row["active"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def task_from_row(row: Row) -> Task:
    return Task(
        id=str(row["id"]),
        scope=Scope(str(row["tenant"]), str(row["environment"])),
        queue=str(row["queue"]),
        type=str(row["type"]),
        state=TaskState(row["state"]),
        params=_unjson(row["params"]),
        priority=int(row["priority"]),
        run_at=row["run_at"],
        attempts=int(row["attempts"]),
        max_attempts=int(row["max_attempts"]),
        initial_backoff_ms=int(row["initial_backoff_ms"]),
        backoff_multiplier=float(row["backoff_multiplier"]),
        max_backoff_ms=int(row["max_backoff_ms"]),
        timeout_ms=int(row["timeout_ms"]),
        idempotency_key=row["idempotency_key"],
        request_hash=row["request_hash"],
        concurrency_key=row["concurrency_key"],
        fairness_key=row["fairness_key"],
        side_effect=SideEffect(row["side_effect"]),
        handler_version=row["handler_version"],
        labels=_unjson(row["labels"]) or {},
        owner_kind=row["owner_kind"],
        owner_id=row["owner_id"],
        owner_step=row["owner_step"],
        gate_id=row["gate_id"],
        traceparent=row["traceparent"],
        result=_unjson(row["result"]),
        error=_unjson(row["error"]),
        cancel_requested=bool(row["cancel_requested"]),
        cancel_reason=row["cancel_reason"],
        lease_epoch=int(row["lease_epoch"]),
        event_seq=int(row["event_seq"]),
        lease_token=row["lease_token"],
        lease_expires_at=row["lease_expires_at"],
        session_id=row["session_id"],
        node=row["node"],
        worker_id=row["worker_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        finished_at=row["finished_at"],
        deadline_at=row["deadline_at"],
    )


# -- queues -----------------------------------------------------------------------------------


async def queue_ensure(tx: Tx, scope: Scope, name: str, now: datetime) -> bool:
    """Create the queue row with default settings unless it exists; answers whether created."""
    try:
        await tx.execute("queue_insert", {**_scope_params(scope), "name": name, "now": now})
    except DuplicateKey:
        return False
    return True


async def queue_lock_or_create(tx: Tx, scope: Scope, name: str, now: datetime) -> Queue:
    """Lock the queue's row, creating it first if it does not exist.

    Locking before inserting matters on MySQL/MariaDB: a duplicate-key INSERT takes a shared
    lock on the existing row, and two writers upgrading shared locks deadlock each other.
    """
    queue = await queue_get(tx, scope, name, lock=True)
    if queue is None:
        await queue_ensure(tx, scope, name, now)
        queue = await queue_get(tx, scope, name, lock=True)
    assert queue is not None
    return queue


async def queue_get(tx: Tx, scope: Scope, name: str, *, lock: bool = False) -> Queue | None:
    """One queue; ``lock`` holds its row for the rest of the transaction (quota checks)."""
    row = await tx.fetch_one(
        "queue_lock" if lock else "queue_get", {**_scope_params(scope), "name": name}
    )
    return None if row is None else queue_from_row(row)


async def queue_list(tx: Tx, scope: Scope, *, limit: int, after: str = "") -> list[Queue]:
    rows = await tx.fetch_all(
        "queue_list", {**_scope_params(scope), "after": after, "limit": limit}
    )
    return [queue_from_row(r) for r in rows]


async def queue_update_settings(
    tx: Tx,
    scope: Scope,
    name: str,
    *,
    paused: bool,
    concurrency_limit: int | None,
    key_concurrency: int,
    max_pending: int | None,
    now: datetime,
) -> None:
    await tx.execute(
        "queue_update_settings",
        {
            **_scope_params(scope),
            "name": name,
            "paused": int(paused),
            "concurrency_limit": concurrency_limit,
            "key_concurrency": key_concurrency,
            "max_pending": max_pending,
            "now": now,
        },
    )


async def queue_add_counts(
    tx: Tx, scope: Scope, name: str, *, pending: int = 0, active: int = 0, now: datetime
) -> None:
    """Move the queue's counters by the given deltas (in the transaction that moves tasks). The
    row stays locked until the transaction ends: callers do this last, to hold it briefly."""
    if pending or active:
        await tx.execute(
            "queue_add_counts",
            {**_scope_params(scope), "name": name, "pending": pending, "active": active,
             "now": now},
        )  # fmt: skip


async def queue_add_pending_within(
    tx: Tx, scope: Scope, name: str, pending: int, now: datetime
) -> bool:
    """Count ``pending`` new waiting tasks into an existing queue that stays within its quota;
    False (nothing changed) when the queue is missing or the quota would be exceeded."""
    changed = await tx.execute(
        "queue_add_pending_within",
        {**_scope_params(scope), "name": name, "pending": pending, "now": now},
    )
    return changed > 0


async def queue_take_direct(tx: Tx, scope: Scope, name: str, type_: str, now: datetime) -> bool:
    """Count a task leased as it was submitted, if its queue allows that now (decision 0010):
    open, no concurrency limit, nothing of its type waiting in the claim range."""
    changed = await tx.execute(
        "queue_take_direct",
        {**_scope_params(scope), "name": name, "type": type_, "now": now},
    )
    return changed > 0


async def queue_take_active_within(tx: Tx, scope: Scope, name: str, n: int, now: datetime) -> bool:
    """Count ``n`` claimed tasks (waiting → active) if the queue is not paused and its
    concurrency limit has room for them; False (nothing changed) otherwise."""
    changed = await tx.execute(
        "queue_take_active_within",
        {**_scope_params(scope), "name": name, "n": n, "now": now},
    )
    return changed > 0


async def key_permits_ensure(
    tx: Tx, scope: Scope, queue: str, keys: Sequence[str], now: datetime
) -> None:
    """Create the permit rows (count 0) of those concurrency keys that have none, in one
    statement; rows that exist are left as they are."""
    if keys:
        params = {**_scope_params(scope), "queue": queue, "now": now}
        rows = [{**params, "concurrency_key": key} for key in keys]
        await tx.execute_many("key_permits_insert_missing", rows)


async def key_permit_active(tx: Tx, scope: Scope, queue: str, concurrency_key: str) -> int:
    """How many tasks of this concurrency key are leased or running (0 without a row)."""
    row = await tx.fetch_one(
        "key_permit_get",
        {**_scope_params(scope), "queue": queue, "concurrency_key": concurrency_key},
    )
    return 0 if row is None else int(row["active"])


async def key_permits_add_many(
    tx: Tx, scope: Scope, queue: str, deltas: Mapping[str, int], now: datetime
) -> None:
    """Move many concurrency keys' counts (rows the caller has locked): one statement per
    distinct delta."""
    by_delta: dict[int, list[str]] = {}
    for key, delta in sorted(deltas.items()):
        if delta:
            by_delta.setdefault(delta, []).append(key)
    for delta, keys in sorted(by_delta.items()):
        await tx.execute(
            "key_permits_add_many",
            {**_scope_params(scope), "queue": queue, "keys": keys, "delta": delta, "now": now},
        )


async def key_permits_prune(tx: Tx, before: datetime, *, limit: int) -> int:
    """Delete up to ``limit`` permit rows of keys idle since before ``before``."""
    return await tx.execute("key_permits_prune", {"before": before, "limit": limit})


async def queue_state_counts(tx: Tx, scope: Scope, name: str) -> dict[str, int]:
    rows = await tx.fetch_all("queue_state_counts", {**_scope_params(scope), "queue": name})
    return {str(r["state"]): int(r["n"]) for r in rows}


async def queue_oldest_ready_at(tx: Tx, scope: Scope, name: str) -> datetime | None:
    row = await tx.fetch_one("queue_oldest_pending", {**_scope_params(scope), "queue": name})
    return None if row is None else row["oldest_at"]


# -- tasks ------------------------------------------------------------------------------------


def task_insert_params(task: Task) -> dict[str, Any]:
    """The parameters of ``task_insert`` for one task (also for bulk ``execute_many``)."""
    return {
        **_scope_params(task.scope),
        "id": task.id,
        "queue": task.queue,
        "type": task.type,
        "state": task.state,
        "params": _json(task.params),
        "priority": task.priority,
        "run_at": task.run_at,
        "max_attempts": task.max_attempts,
        "initial_backoff_ms": task.initial_backoff_ms,
        "backoff_multiplier": task.backoff_multiplier,
        "max_backoff_ms": task.max_backoff_ms,
        "timeout_ms": task.timeout_ms,
        "idempotency_key": task.idempotency_key,
        "request_hash": task.request_hash,
        "concurrency_key": task.concurrency_key,
        "fairness_key": task.fairness_key,
        "side_effect": task.side_effect,
        "handler_version": task.handler_version,
        "labels": _json(task.labels) if task.labels else None,
        "owner_kind": task.owner_kind,
        "owner_id": task.owner_id,
        "owner_step": task.owner_step,
        "gate_id": task.gate_id,
        "traceparent": task.traceparent,
        "created_at": task.created_at,
    }


async def task_ready_insert_many(tx: Tx, tasks: Sequence[Task]) -> None:
    """Put pending tasks (no concurrency key, gate open or none) into the claim range."""
    if tasks:
        await tx.execute_many("task_ready_insert", [task_ready_params(t) for t in tasks])


IDS_PER_READ = 500  # task ids one read of tasks_in_states covers


async def tasks_in_states(tx: Tx, task_ids: Sequence[str], states: Iterable[str]) -> list[str]:
    """Which of these tasks are in one of ``states``."""
    found: list[str] = []
    ordered, wanted = sorted(set(task_ids)), sorted(states)
    for part in chunks(ordered, IDS_PER_READ):
        rows = await tx.fetch_all("tasks_in_states", {"task_ids": list(part), "states": wanted})
        found += [str(r["id"]) for r in rows]
    return found


async def task_get(tx: Tx, scope: Scope, task_id: str, *, lock: bool = False) -> Task | None:
    """One task of the scope; ``lock`` holds its row until the transaction ends."""
    row = await tx.fetch_one(
        "task_lock" if lock else "task_get", {**_scope_params(scope), "id": task_id}
    )
    return None if row is None else task_from_row(row)


async def task_get_by_idempotency_key(tx: Tx, scope: Scope, key: str) -> Task | None:
    row = await tx.fetch_one(
        "task_get_by_idempotency_key", {**_scope_params(scope), "idempotency_key": key}
    )
    return None if row is None else task_from_row(row)


async def task_list(
    tx: Tx,
    scope: Scope,
    *,
    limit: int,
    before: str = LAST,
    queue: str | None = None,
    state: str | None = None,
) -> list[Task]:
    """Newest first, strictly before the cursor id; each filter combination uses its index."""
    params: dict[str, Any] = {**_scope_params(scope), "limit": limit, "before": before}
    if queue is not None:
        params["queue"] = queue
    if state is not None:
        params["state"] = state
    name = {
        (False, False): "task_list",
        (False, True): "task_list_by_state",
        (True, False): "task_list_by_queue",
        (True, True): "task_list_by_queue_state",
    }[(queue is not None, state is not None)]
    return [task_from_row(r) for r in await tx.fetch_all(name, params)]


def task_ready_params(task: Task) -> dict[str, Any]:
    """The parameters of ``task_ready_insert`` for one task."""
    return {
        **_scope_params(task.scope),
        "task_id": task.id,
        "queue": task.queue,
        "type": task.type,
        "priority": task.priority,
        "run_at": task.run_at,
        "fairness_key": task.fairness_key or "",
        "concurrency_key": task.concurrency_key,
        "handler_version": task.handler_version,
        "gate_id": task.gate_id,
    }


async def task_ready_insert(tx: Tx, task: Task) -> None:
    """Put a pending task into the claim range."""
    await tx.execute("task_ready_insert", task_ready_params(task))


async def task_ready_delete(tx: Tx, task_id: str) -> bool:
    return await tx.execute("task_ready_delete", {"task_id": task_id}) == 1


def task_event_params(event: ResultEvent) -> dict[str, Any]:
    """The parameters of ``task_event_insert`` for one event."""
    return {
        **_scope_params(event.scope),
        "id": event.id,
        "task_id": event.task_id,
        "attempt": event.attempt,
        "seq": event.seq,
        "state": event.state,
        "owner_kind": event.owner_kind,
        "owner_id": event.owner_id,
        "created_at": event.created_at,
    }


async def task_events_insert_many(tx: Tx, events: Sequence[ResultEvent]) -> None:
    """Write result events of tasks whose counters the statement that moved them advanced
    already (the bulk success path), in one statement."""
    if events:
        await tx.execute_many("task_event_insert", [task_event_params(e) for e in events])


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


def _events(rows: Sequence[Row]) -> list[ResultEvent]:
    return [
        ResultEvent(
            id=str(r["id"]),
            scope=Scope(str(r["tenant"]), str(r["environment"])),
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


async def attempt_list(tx: Tx, task_id: str) -> list[Attempt]:
    rows = await tx.fetch_all("attempt_list", {"task_id": task_id})
    return [attempt_from_row(r) for r in rows]


def attempt_from_row(r: Row) -> Attempt:
    return Attempt(
        task_id=str(r["task_id"]),
        number=int(r["number"]),
        state=AttemptState(r["state"]),
        cause=r["cause"],
        worker_id=r["worker_id"],
        session_id=r["session_id"],
        node=r["node"],
        leased_at=r["leased_at"],
        started_at=r["started_at"],
        ended_at=r["ended_at"],
        lease_expires_at=r["lease_expires_at"],
        error=_unjson(r["error"]),
    )


async def task_event_mark_processed(tx: Tx, event_id: str, now: datetime) -> bool:
    """Mark an event processed; False when it already was (a duplicate delivery)."""
    return await tx.execute("task_event_mark_processed", {"id": event_id, "now": now}) == 1
