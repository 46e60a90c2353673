"""Store methods of tasks: their reads and locks, and every statement that writes task rows —
creating them, leasing, starting, renewing and moving them between states, the cancel flag,
promotion, and pruning (one module writes task rows; the other store modules only read them).
Where a task's change also changes its attempt or its result events, the statements for those
rows are the attempts' and the events' modules' own.

The guarded moves take any number of :class:`TaskMove` values and answer how many rows they
changed; a move is fenced by the state (and, where an attempt is involved, the attempt) its
caller read under the row's lock, so a count short of the moves given means one of them lost
its race. A result event advances its task's counter here (:func:`task_event_seqs_advance`,
:func:`task_event_insert`) before ``task_events_insert_many`` writes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from orbit_server.pulse.model import LockedTask, ResultEvent, Task
from orbit_server.pulse.states import SideEffect, TaskState
from orbit_server.scope import Scope
from orbit_server.store.attempts import (
    attempts_delete_for_tasks,
    attempts_end_running_many,
    attempts_start_and_end_many,
    attempts_start_many,
)
from orbit_server.store.base import (
    DuplicateKey,
    Row,
    Tx,
    chunks,
    json_table_rows,
    json_value,
    row_scope,
    scope_params,
)
from orbit_server.store.base import json_or_none as _json
from orbit_server.store.task_events import (
    task_event_insert_now,
    task_events_delete_for_tasks,
)

LAST = "~"  # sorts after every id
IDS_PER_READ = 500  # task ids one read of tasks_in_states covers
WORKFLOW_OWNER = "workflow"  # the owner kind of a workflow step's task (its id: the instance)


@dataclass(frozen=True, slots=True)
class HeldLease:
    task_id: str
    attempt: int
    lease_token: str
    state: str


def task_from_row(row: Row) -> Task:
    return Task(
        id=str(row["id"]),
        scope=row_scope(row),
        queue=str(row["queue"]),
        type=str(row["type"]),
        state=TaskState(row["state"]),
        params=json_value(row["params"]),
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
        labels=json_value(row["labels"]) or {},
        owner_kind=row["owner_kind"],
        owner_id=row["owner_id"],
        owner_step=row["owner_step"],
        gate_id=row["gate_id"],
        traceparent=row["traceparent"],
        result=json_value(row["result"]),
        error=json_value(row["error"]),
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
        owner_name=row.get("owner_name"),
        owner_version=row.get("owner_version"),
    )


def _locked(r: Row) -> LockedTask:
    return LockedTask(
        id=str(r["id"]), scope=row_scope(r),
        queue=str(r["queue"]), state=TaskState(r["state"]), lease_epoch=int(r["lease_epoch"]),
        lease_token=r["lease_token"], session_id=r["session_id"],
        lease_expires_at=r["lease_expires_at"],
        deadline_at=r["deadline_at"], cancel_requested=bool(r["cancel_requested"]),
        gate_id=r["gate_id"], timeout_ms=int(r["timeout_ms"]),
        concurrency_key=r["concurrency_key"], owner_kind=r["owner_kind"],
        owner_id=r["owner_id"], event_seq=int(r["event_seq"]),
        side_effect=SideEffect(r["side_effect"]),
    )  # fmt: skip


def task_insert_params(task: Task) -> dict[str, Any]:
    """The parameters of ``task_insert`` for one task (also for bulk ``execute_many``)."""
    return {
        **scope_params(task.scope),
        "id": task.id,
        "queue": task.queue,
        "type": task.type,
        "state": task.state,
        "params": msgspec.json.encode(task.params).decode(),
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
        "labels": msgspec.json.encode(task.labels).decode() if task.labels else None,
        "owner_kind": task.owner_kind,
        "owner_id": task.owner_id,
        "owner_step": task.owner_step,
        "gate_id": task.gate_id,
        "traceparent": task.traceparent,
        "created_at": task.created_at,
    }


# -- reads ------------------------------------------------------------------------------------


async def task_get(tx: Tx, scope: Scope, task_id: str, *, lock: bool = False) -> Task | None:
    """One task of the scope; ``lock`` holds its row until the transaction ends."""
    row = await tx.fetch_one(
        "task_lock" if lock else "task_get", {**scope_params(scope), "id": task_id}
    )
    return None if row is None else task_from_row(row)


async def task_get_by_idempotency_key(tx: Tx, scope: Scope, key: str) -> Task | None:
    row = await tx.fetch_one(
        "task_get_by_idempotency_key", {**scope_params(scope), "idempotency_key": key}
    )
    return None if row is None else task_from_row(row)


async def tasks_get_many(tx: Tx, task_ids: Sequence[str]) -> list[Task]:
    """Tasks by id, in the order asked (ids without a task are left out)."""
    if not task_ids:
        return []
    rows = await tx.fetch_all("tasks_get_many", {"task_ids": list(task_ids)})
    by_id = {str(r["id"]): task_from_row(r) for r in rows}
    return [by_id[t] for t in task_ids if t in by_id]


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
    params: dict[str, Any] = {**scope_params(scope), "limit": limit, "before": before}
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


async def tasks_in_states(tx: Tx, task_ids: Sequence[str], states: Iterable[str]) -> list[str]:
    """Which of these tasks are in one of ``states``."""
    found: list[str] = []
    ordered, wanted = sorted(set(task_ids)), sorted(states)
    for part in chunks(ordered, IDS_PER_READ):
        rows = await tx.fetch_all("tasks_in_states", {"task_ids": list(part), "states": wanted})
        found += [str(r["id"]) for r in rows]
    return found


async def queue_state_counts(tx: Tx, scope: Scope, name: str) -> dict[str, int]:
    """How many tasks of a queue are in each state (states without any are absent)."""
    rows = await tx.fetch_all("queue_state_counts", {**scope_params(scope), "queue": name})
    return {str(r["state"]): int(r["n"]) for r in rows}


async def queue_state_counts_upto(
    tx: Tx, scope: Scope, name: str, states: Sequence[str], most: int
) -> dict[str, int]:
    """How many tasks of a queue are in each of ``states``, each counted up to ``most + 1``
    (more than ``most``: at least that many)."""
    counts = {}
    for state in states:
        row = await tx.fetch_one(
            "queue_state_count_upto",
            {**scope_params(scope), "queue": name, "state": state, "upto": most + 1},
        )
        counts[state] = 0 if row is None else int(row["n"])
    return counts


async def queue_pending_keys(tx: Tx, scope: Scope, queue: str) -> list[str]:
    """Every concurrency key with pending tasks in a queue, in key order."""
    rows = await tx.fetch_all("queue_pending_keys", {**scope_params(scope), "queue": queue})
    return [str(r["concurrency_key"]) for r in rows]


async def gate_pending_keys(tx: Tx, gate_id: str) -> list[tuple[Scope, str, str]]:
    """(scope, queue, concurrency key) of every key with pending tasks behind a gate."""
    rows = await tx.fetch_all("gate_pending_keys", {"gate_id": gate_id})
    return sorted((row_scope(r), str(r["queue"]), str(r["concurrency_key"])) for r in rows)


async def gate_pending_queues(tx: Tx, gate_id: str) -> list[tuple[Scope, str]]:
    """(scope, queue) of the pending tasks without a concurrency key behind a gate."""
    rows = await tx.fetch_all("gate_pending_queues", {"gate_id": gate_id})
    return sorted((row_scope(r), str(r["queue"])) for r in rows)


async def session_leases(tx: Tx, session_id: str) -> list[HeldLease]:
    """The leases a session holds: its leased and running tasks."""
    rows = await tx.fetch_all("session_leases", {"session_id": session_id})
    return [
        HeldLease(str(r["id"]), int(r["lease_epoch"]), str(r["lease_token"]), str(r["state"]))
        for r in rows
    ]


# -- locks and scans --------------------------------------------------------------------------


async def tasks_lock_many(tx: Tx, task_ids: Sequence[str]) -> dict[str, LockedTask]:
    """Lock many task rows in id order (one statement); answers their leases by id."""
    if not task_ids:
        return {}
    rows = await tx.fetch_all("tasks_lock_many", {"task_ids": sorted(set(task_ids))})
    return {str(r["id"]): _locked(r) for r in rows}


async def tasks_lock_many_in(
    tx: Tx, scope: Scope, task_ids: Sequence[str]
) -> dict[str, LockedTask]:
    """``tasks_lock_many`` for the tasks of one scope: ids of other scopes are left alone."""
    if not task_ids:
        return {}
    params = {**scope_params(scope), "task_ids": sorted(set(task_ids))}
    rows = await tx.fetch_all("tasks_lock_many_in", params)
    return {str(r["id"]): _locked(r) for r in rows}


async def task_lock_fenced(
    tx: Tx, task_id: str, epoch: int, token: str, session_id: str
) -> Task | None:
    """The task if (and only if) this lease — attempt, token and session — still holds it (or
    last held it, once it ended); locks the row."""
    row = await tx.fetch_one(
        "task_lock_fenced",
        {"id": task_id, "epoch": epoch, "token": token, "session_id": session_id},
    )
    return None if row is None else task_from_row(row)


async def leases_expired(tx: Tx, now: datetime, *, limit: int) -> list[tuple[str, Scope]]:
    """Tasks whose lease ended before ``now`` (skipping rows another node is handling), sorted
    by queue so that every node takes queue rows in one order."""
    rows = await tx.fetch_all("leases_expired", {"now": now, "limit": limit})
    rows.sort(
        key=lambda r: (str(r["tenant"]), str(r["environment"]), str(r["queue"]), str(r["id"]))
    )
    return [(str(r["id"]), row_scope(r)) for r in rows]


async def scheduled_due(tx: Tx, now: datetime, *, limit: int) -> list[Task]:
    """Scheduled tasks due at ``now``, the longest due first, locked (others' skipped)."""
    rows = await tx.fetch_all("scheduled_due", {"now": now, "limit": limit})
    return [task_from_row(r) for r in rows]


# -- inserts ----------------------------------------------------------------------------------


async def task_insert(tx: Tx, task: Task) -> None:
    """Insert a new task; DuplicateKey when its idempotency key is taken."""
    await tx.execute("task_insert", task_insert_params(task))


async def task_insert_leased(tx: Tx, task: Task) -> None:
    """Insert a task already leased (its lease fields set): direct dispatch, decision 0010."""
    await tx.execute(
        "task_insert_leased",
        {
            **task_insert_params(task),
            "lease_token": task.lease_token,
            "lease_expires_at": task.lease_expires_at,
            "session_id": task.session_id,
            "node": task.node,
            "worker_id": task.worker_id,
        },
    )


async def tasks_insert_many(tx: Tx, tasks: Sequence[Task]) -> None:
    """Insert tasks without idempotency keys in one multi-row statement (a deferred write)."""
    if tasks:
        tx.defer_many("task_insert", [task_insert_params(t) for t in tasks])


# -- guarded moves ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskMove:
    """One task row's move, from the state and attempt its caller read."""

    task_id: str
    expected_state: str
    epoch: int
    state: str
    run_at: datetime | None = None  # finish: the row's run time (a retry's next one)
    result: Any = None
    error: dict[str, Any] | None = None
    finished: bool = False  # terminal: finished_at is set
    reason: str | None = None  # a cancel's


async def tasks_finish(tx: Tx, moves: Sequence[TaskMove], now: datetime) -> int:
    """Started attempts' tasks to an end state, needs_review or a retry's wait."""
    return await tx.execute_many("task_finish", [
        {"id": m.task_id, "epoch": m.epoch, "expected_state": m.expected_state,
         "state": m.state, "result": _json(m.result), "error": _json(m.error),
         "finished_at": now if m.finished else None, "run_at": m.run_at, "now": now}
        for m in moves
    ])  # fmt: skip


async def tasks_return_pending(tx: Tx, moves: Sequence[TaskMove], now: datetime) -> int:
    """Leased work back to pending without using an attempt (released, expired, gate)."""
    return await tx.execute_many("task_return_pending", [
        {"id": m.task_id, "epoch": m.epoch, "expected_state": m.expected_state,
         "run_at": m.run_at, "now": now}
        for m in moves
    ])  # fmt: skip


async def tasks_end_unstarted(tx: Tx, moves: Sequence[TaskMove], now: datetime) -> int:
    """Scheduled, pending or leased work that never started ends (a cancel)."""
    return await tx.execute_many("task_finish_unstarted", [
        {"id": m.task_id, "state": m.state, "reason": m.reason, "now": now,
         "expected_state": m.expected_state, "lease_epoch": m.epoch}
        for m in moves
    ])  # fmt: skip


async def tasks_resolve(tx: Tx, moves: Sequence[TaskMove], now: datetime) -> int:
    """An operator's decisions on needs_review tasks."""
    return await tx.execute_many("task_resolve", [
        {"id": m.task_id, "state": m.state, "result": _json(m.result), "error": _json(m.error),
         "now": now}
        for m in moves
    ])  # fmt: skip


async def tasks_reopen(tx: Tx, moves: Sequence[TaskMove], now: datetime) -> int:
    """An operator's retries: ended tasks back to pending with at least one attempt left."""
    return await tx.execute_many("task_reopen", [
        {"id": m.task_id, "expected_state": m.expected_state, "now": now} for m in moves
    ])  # fmt: skip


# -- leases and starts ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    """The lease ``tasks_lease_many`` gives a batch of pending tasks: one token and end, held
    by one worker's session."""

    lease_token: str
    expires_at: datetime
    session_id: str
    node: str
    worker_id: str


async def tasks_lease_many(
    tx: Tx, task_ids: Sequence[str], grant: LeaseGrant, now: datetime
) -> list[Task]:
    """Lease pending tasks to a session (a new epoch each); answers the tasks as they are now
    (the update and the read in one round trip), a workflow step's task with its workflow's
    definition and version (``owner_name``, ``owner_version``) for its delivery."""
    if not task_ids:
        return []
    tx.defer(
        "tasks_lease_many",
        {
            "task_ids": list(task_ids),
            "lease_token": grant.lease_token,
            "expires_at": grant.expires_at,
            "session_id": grant.session_id,
            "node": grant.node,
            "worker_id": grant.worker_id,
            "now": now,
        },
    )
    rows = await tx.fetch_all(
        "tasks_get_leased", {"task_ids": list(task_ids), "workflow_kind": WORKFLOW_OWNER}
    )
    by_id = {str(r["id"]): task_from_row(r) for r in rows}
    return [by_id[t] for t in task_ids if t in by_id]


@dataclass(frozen=True, slots=True)
class LeaseAdoption:
    """A held lease, fenced by its attempt and token, moving to the session a worker
    reconnected with (``task_adopt``)."""

    task_id: str
    epoch: int
    token: str
    session_id: str
    node: str
    worker_id: str


async def task_adopt(tx: Tx, adoption: LeaseAdoption, now: datetime) -> bool:
    """Move a lease that still holds to a new session (a reconnect); False when it does not."""
    changed = await tx.execute(
        "task_adopt",
        {
            "id": adoption.task_id,
            "epoch": adoption.epoch,
            "token": adoption.token,
            "session_id": adoption.session_id,
            "node": adoption.node,
            "worker_id": adoption.worker_id,
            "now": now,
        },
    )
    return changed == 1


@dataclass(frozen=True, slots=True)
class TaskStart:
    """A leased attempt's start (``task_set_running``), fenced by its attempt and token: its
    lease runs to ``expires_at`` but never past ``deadline_at`` (start + timeout)."""

    task_id: str
    epoch: int
    token: str
    expires_at: datetime
    deadline_at: datetime


async def task_set_running(tx: Tx, start: TaskStart, now: datetime) -> bool:
    """Start the attempt; False when the lease no longer holds the task leased."""
    changed = await tx.execute(
        "task_set_running",
        {
            "id": start.task_id,
            "epoch": start.epoch,
            "token": start.token,
            "expires_at": start.expires_at,
            "deadline_at": start.deadline_at,
            "now": now,
        },
    )
    return changed == 1


async def tasks_start_many(
    tx: Tx, task_ids: Sequence[str], *, expires_at: datetime, deadline_at: datetime, now: datetime
) -> None:
    """Leased tasks (locked by the caller) start: running, one more attempt, lease and deadline
    set, their attempt rows marked started — two statements for the batch."""
    if not task_ids:
        return
    ids = list(task_ids)
    await tx.execute(
        "tasks_start_many",
        {"task_ids": ids, "expires_at": expires_at, "deadline_at": deadline_at, "now": now},
    )
    await attempts_start_many(tx, ids, expires_at=expires_at, now=now)


async def tasks_renew_many(
    tx: Tx, task_ids: Sequence[str], expires_at: datetime, now: datetime
) -> None:
    """Extend the leases of tasks the caller has locked and found held: to ``expires_at``, or
    to the attempt's deadline if that comes first."""
    if task_ids:
        await tx.execute(
            "tasks_renew_many",
            {"task_ids": sorted(set(task_ids)), "expires_at": expires_at, "now": now},
        )


@dataclass(frozen=True, slots=True)
class Successes:
    """Tasks that succeed together (``tasks_succeed_many``), each with its result: they leave
    one state, and their attempts end one way."""

    task_ids: Sequence[str]
    results: Sequence[Any]  # one per task, in the same order
    from_state: str
    attempt_state: str
    cause: str
    starting: bool = False  # each report is its eager attempt's start as well (decision 0008)


async def tasks_succeed_many(tx: Tx, successes: Successes, now: datetime) -> None:
    """Tasks in ``from_state`` (locked by the caller) to ``succeeded`` with their results and
    their attempts ended in ``attempt_state`` for ``cause``, each row's result-event counter
    advanced (the caller writes the events): a few statements for the whole batch (results
    other than ``None``: one more on MySQL/MariaDB, one each on SQLite). ``starting``: the
    attempt is counted and marked started and ended at once."""
    s = successes
    if not s.task_ids:
        return
    ids = list(s.task_ids)
    tx.defer(
        "tasks_succeed_many",
        {"task_ids": ids, "now": now, "counted": int(s.starting), "from_state": s.from_state},
    )
    rows = [
        {"id": task_id, "result": _json(result)}
        for task_id, result in zip(ids, s.results, strict=True)
        if result is not None
    ]
    if rows and tx.dialect == "mysql":
        tx.defer("task_results_set", {"rows_json": json_table_rows(rows)})
    elif rows:
        tx.defer_many("task_results_set", rows)
    end = attempts_start_and_end_many if s.starting else attempts_end_running_many
    await end(tx, ids, s.attempt_state, s.cause, now)


# -- promotion, cancel and result events ------------------------------------------------------


async def tasks_set_pending_many(tx: Tx, task_ids: Sequence[str], now: datetime) -> int:
    """Scheduled tasks whose time came become pending; answers how many did."""
    if not task_ids:
        return 0
    return await tx.execute("tasks_set_pending_many", {"task_ids": list(task_ids), "now": now})


async def task_request_cancel(tx: Tx, task_id: str, reason: str | None, now: datetime) -> bool:
    """Flag a running task for cancellation; answers False if it was not running or flagged."""
    changed = await tx.execute("task_request_cancel", {"id": task_id, "reason": reason, "now": now})
    return changed == 1


async def task_event_seqs_advance(tx: Tx, seqs: Sequence[tuple[str, int]]) -> int:
    """Advance each task's result-event counter to its given value, guarded by the value
    before it; answers how many advanced (a task short of it has that event already)."""
    return await tx.execute_many(
        "task_event_seq_set", [{"task_id": task_id, "seq": seq} for task_id, seq in seqs]
    )


async def task_event_insert(tx: Tx, event: ResultEvent) -> bool:
    """Write the task's ``event.seq``-th result event and advance its counter; answers False
    when that event already exists (a duplicate)."""
    if not await tx.execute("task_event_seq_set", {"task_id": event.task_id, "seq": event.seq}):
        return False  # the task has this event already (or is gone)
    try:
        await task_event_insert_now(tx, event)
    except DuplicateKey:
        return False
    return True


# -- retention --------------------------------------------------------------------------------


async def idempotency_keys_expire(tx: Tx, before: datetime, *, limit: int) -> int:
    """Forget the idempotency keys of tasks that finished before ``before`` (the key can then
    be used for a new task); answers how many were forgotten."""
    return await tx.execute("idempotency_keys_expire", {"before": before, "limit": limit})


async def tasks_prune(tx: Tx, before: datetime, *, limit: int) -> int:
    """Delete up to ``limit`` tasks that finished before ``before`` with their attempts and
    processed events; a task whose result event is not yet processed is kept."""
    rows = await tx.fetch_all("tasks_finished_before", {"before": before, "limit": limit})
    ids = [str(r["id"]) for r in rows]
    if not ids:
        return 0
    await attempts_delete_for_tasks(tx, ids)
    await task_events_delete_for_tasks(tx, ids)
    return await tx.execute("tasks_delete", {"task_ids": ids})


async def tasks_finished_per_minute(tx: Tx, scope: Scope, since: datetime) -> dict[str, int]:
    """How many tasks of ``scope`` finished in each minute since ``since``, by
    ``"YYYY-MM-DD HH:MM"`` (UTC); minutes without any are absent."""
    rows = await tx.fetch_all(
        "tasks_finished_per_minute",
        {"tenant": scope.tenant, "environment": scope.environment, "since": since},
    )
    return {str(r["minute"]): int(r["n"]) for r in rows}
