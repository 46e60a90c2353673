"""The guarded statements that move task rows from one state to another, set by set.

Each takes any number of :class:`TaskMove` values and answers how many rows it changed; a
move is fenced by the state (and, where an attempt is involved, the attempt) its caller read
under the row's lock, so a count short of the moves given means one of them lost its race.
Result events go with :func:`task_event_seqs_advance` and ``task_events_insert_many``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from orbit_server.store.base import Tx


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


def _json(value: Any) -> str | None:
    return None if value is None else msgspec.json.encode(value).decode()


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
