"""Store methods of attempts: one row per lease of a task, numbered by its lease epoch, that
records how the attempt went (decisions 0003, 0016)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orbit_server.pulse.model import Attempt, Task
from orbit_server.pulse.states import AttemptState
from orbit_server.store.base import Row, Tx, json_or_none, json_value


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
        error=json_value(r["error"]),
        progress=json_value(r["progress"]),
        progress_at=r["progress_at"],
    )


async def attempts_insert(tx: Tx, leased: Sequence[Task], now: datetime) -> None:
    """One attempt row per new lease, numbered by the lease epoch. An attempt is never leased
    before the one it follows ended: ``now`` is when this transaction began, on this node's
    clock, and the previous attempt's end may be later (a transaction that committed while
    this one ran, another node's clock ahead of this one's) — then it leases at that end."""
    ended: dict[str, datetime] = {}
    later = {t.id: t.lease_epoch - 1 for t in leased if t.lease_epoch > 1}
    if later:
        for r in await tx.fetch_all("attempts_ended", {"task_ids": sorted(later)}):
            if int(r["number"]) == later[str(r["task_id"])] and r["ended_at"] is not None:
                ended[str(r["task_id"])] = r["ended_at"]
    tx.defer_many(
        "attempt_insert",
        [
            {
                "task_id": t.id,
                "number": t.lease_epoch,
                "worker_id": t.worker_id,
                "session_id": t.session_id,
                "node": t.node,
                "leased_at": max(now, ended.get(t.id, now)),
                "lease_expires_at": t.lease_expires_at,
            }
            for t in leased
        ],
    )


@dataclass(frozen=True, slots=True)
class AttemptUpdate:
    """A change of one attempt row (``attempt_update``)."""

    task_id: str
    number: int
    state: str
    cause: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    lease_expires_at: datetime | None = None
    error: dict[str, Any] | None = None


async def attempts_update_many(tx: Tx, updates: Sequence[AttemptUpdate]) -> None:
    """Change many attempt rows in one call."""
    if updates:
        await tx.execute_many(
            "attempt_update",
            [
                {
                    "task_id": u.task_id,
                    "number": u.number,
                    "state": u.state,
                    "cause": u.cause,
                    "started_at": u.started_at,
                    "ended_at": u.ended_at,
                    "lease_expires_at": u.lease_expires_at,
                    "error": json_or_none(u.error),
                }
                for u in updates
            ],
        )


async def attempts_start_many(
    tx: Tx, task_ids: Sequence[str], *, expires_at: datetime, now: datetime
) -> None:
    """The leased attempts of these tasks start running, their leases until ``expires_at``."""
    await tx.execute(
        "attempts_start_many", {"task_ids": list(task_ids), "expires_at": expires_at, "now": now}
    )


async def attempts_end_running_many(
    tx: Tx, task_ids: Sequence[str], state: str, cause: str, now: datetime
) -> None:
    """The running attempts of these tasks end in ``state`` for ``cause`` (a deferred write)."""
    tx.defer(
        "attempts_end_running_many",
        {"task_ids": list(task_ids), "state": state, "cause": cause, "now": now},
    )


async def attempts_start_and_end_many(
    tx: Tx, task_ids: Sequence[str], state: str, cause: str, now: datetime
) -> None:
    """The leased attempts of these tasks start and end at once, in ``state`` for ``cause``:
    an eager attempt whose report is its start as well (decision 0008); a deferred write."""
    tx.defer(
        "attempts_start_and_end_many",
        {"task_ids": list(task_ids), "state": state, "cause": cause, "now": now},
    )


@dataclass(frozen=True, slots=True)
class ProgressReport:
    """What the handler of one held attempt reported about its progress: JSON text, already
    checked for size by the caller."""

    task_id: str
    number: int
    progress: str


async def attempts_progress_set(tx: Tx, reports: Sequence[ProgressReport], now: datetime) -> None:
    """Record the progress of attempts the caller has locked and found held, reported at
    ``now`` (a deferred write: it shares the round trip of the unit's next statement)."""
    if reports:
        tx.defer_many(
            "attempt_progress_set",
            [
                {"task_id": r.task_id, "number": r.number, "progress": r.progress, "now": now}
                for r in reports
            ],
        )


async def attempts_of_tasks(tx: Tx, task_ids: Sequence[str]) -> dict[str, list[Attempt]]:
    """The attempts of each of these tasks, in order (tasks without any are absent)."""
    found: dict[str, list[Attempt]] = {}
    if task_ids:
        for row in await tx.fetch_all("attempts_of_tasks", {"task_ids": list(task_ids)}):
            attempt = attempt_from_row(row)
            found.setdefault(attempt.task_id, []).append(attempt)
    return found


async def attempt_get(tx: Tx, task_id: str, number: int) -> Attempt | None:
    rows = await tx.fetch_all("attempt_get", {"task_id": task_id, "number": number})
    return attempt_from_row(rows[0]) if rows else None


async def attempt_list(tx: Tx, task_id: str) -> list[Attempt]:
    rows = await tx.fetch_all("attempt_list", {"task_id": task_id})
    return [attempt_from_row(r) for r in rows]


async def attempts_delete_for_tasks(tx: Tx, task_ids: Sequence[str]) -> int:
    """Delete every attempt of these tasks (they are being pruned)."""
    return await tx.execute("attempts_delete_for_tasks", {"task_ids": list(task_ids)})
