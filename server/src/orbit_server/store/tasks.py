"""Every statement that writes task rows: creating them, leasing, starting, renewing and
moving them between states, the cancel flag, promotion, and pruning (one module writes task
rows; the other store modules only read them).

The guarded moves take any number of :class:`TaskMove` values and answer how many rows they
changed; a move is fenced by the state (and, where an attempt is involved, the attempt) its
caller read under the row's lock, so a count short of the moves given means one of them lost
its race. A result event advances its task's counter here (:func:`task_event_seqs_advance`,
:func:`task_event_insert`) before ``task_events_insert_many`` writes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orbit_server.pulse.model import ResultEvent, Task
from orbit_server.store.base import DuplicateKey, Tx, json_table_rows
from orbit_server.store.base import json_or_none as _json
from orbit_server.store.leases import tasks_get_many
from orbit_server.store.pulse import task_event_params, task_insert_params


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


async def task_event_seqs_advance(tx: Tx, seqs: Sequence[tuple[str, int]]) -> int:
    """Advance each task's result-event counter to its given value, guarded by the value
    before it; answers how many advanced (a task short of it has that event already)."""
    return await tx.execute_many(
        "task_event_seq_set", [{"task_id": task_id, "seq": seq} for task_id, seq in seqs]
    )


async def tasks_lease_many(
    tx: Tx,
    task_ids: Sequence[str],
    *,
    lease_token: str,
    expires_at: datetime,
    session_id: str,
    node: str,
    worker_id: str,
    now: datetime,
) -> list[Task]:
    """Lease pending tasks to a session (a new epoch each); answers the leased tasks."""
    if not task_ids:
        return []
    await tx.execute(
        "tasks_lease_many",
        {
            "task_ids": list(task_ids),
            "lease_token": lease_token,
            "expires_at": expires_at,
            "session_id": session_id,
            "node": node,
            "worker_id": worker_id,
            "now": now,
        },
    )
    return await tasks_get_many(tx, task_ids)


async def tasks_succeed_many(
    tx: Tx,
    task_ids: Sequence[str],
    results: Sequence[Any],
    now: datetime,
    *,
    from_state: str,
    attempt_state: str,
    cause: str,
    starting: bool = False,
) -> None:
    """Tasks in ``from_state`` (locked by the caller) to ``succeeded`` with their results and
    their attempts ended in ``attempt_state`` for ``cause``, each row's result-event counter
    advanced (the caller writes the events): a few statements for the whole batch (results
    other than ``None``: one more on MySQL/MariaDB, one each on SQLite). ``starting``: each
    report is its eager attempt's start as well (decision 0008): the attempt is counted and
    marked started and ended at once."""
    if not task_ids:
        return
    ids = list(task_ids)
    await tx.execute(
        "tasks_succeed_many",
        {"task_ids": ids, "now": now, "counted": int(starting),
         "from_state": from_state},
    )  # fmt: skip
    rows = [
        {"id": task_id, "result": _json(result)}
        for task_id, result in zip(ids, results, strict=True)
        if result is not None
    ]
    if rows and tx.dialect == "mysql":
        await tx.execute("task_results_set", {"rows_json": json_table_rows(rows)})
    elif rows:
        await tx.execute_many("task_results_set", rows)
    await tx.execute(
        "attempts_start_and_end_many" if starting else "attempts_end_running_many",
        {"task_ids": ids, "state": attempt_state, "cause": cause, "now": now},
    )


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
    await tx.execute("attempts_start_many", {"task_ids": ids, "expires_at": expires_at, "now": now})


async def task_set_running(
    tx: Tx,
    task_id: str,
    epoch: int,
    token: str,
    expires_at: datetime,
    now: datetime,
    *,
    deadline_at: datetime,
) -> bool:
    """Start the attempt; its lease never reaches past ``deadline_at`` (start + timeout)."""
    changed = await tx.execute(
        "task_set_running",
        {
            "id": task_id,
            "epoch": epoch,
            "token": token,
            "expires_at": expires_at,
            "deadline_at": deadline_at,
            "now": now,
        },
    )
    return changed == 1


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


async def tasks_set_pending_many(tx: Tx, task_ids: Sequence[str], now: datetime) -> int:
    if not task_ids:
        return 0
    return await tx.execute("tasks_set_pending_many", {"task_ids": list(task_ids), "now": now})


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
    """Insert tasks without idempotency keys in one multi-row statement."""
    if tasks:
        await tx.execute_many("task_insert", [task_insert_params(t) for t in tasks])


async def task_request_cancel(tx: Tx, task_id: str, reason: str | None, now: datetime) -> bool:
    """Flag a running task for cancellation; answers False if it was not running or flagged."""
    changed = await tx.execute("task_request_cancel", {"id": task_id, "reason": reason, "now": now})
    return changed == 1


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
    await tx.execute("attempts_delete_for_tasks", {"task_ids": ids})
    await tx.execute("events_delete_for_tasks", {"task_ids": ids})
    return await tx.execute("tasks_delete", {"task_ids": ids})


async def task_event_insert(tx: Tx, event: ResultEvent) -> bool:
    """Write the task's ``event.seq``-th result event and advance its counter; answers False
    when that event already exists (a duplicate)."""
    if not await tx.execute("task_event_seq_set", {"task_id": event.task_id, "seq": event.seq}):
        return False  # the task has this event already (or is gone)
    try:
        await tx.execute("task_event_insert", task_event_params(event))
    except DuplicateKey:
        return False
    return True


async def task_adopt(
    tx: Tx,
    task_id: str,
    epoch: int,
    token: str,
    *,
    session_id: str,
    node: str,
    worker_id: str,
    now: datetime,
) -> bool:
    """Move a lease that still holds to a new session (a reconnect); False when it does not."""
    changed = await tx.execute(
        "task_adopt",
        {
            "id": task_id,
            "epoch": epoch,
            "token": token,
            "session_id": session_id,
            "node": node,
            "worker_id": worker_id,
            "now": now,
        },
    )
    return changed == 1
