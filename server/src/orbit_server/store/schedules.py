"""Store methods of schedules (SPEC P9): the schedules, their fire ledger and backfills."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from orbit_server.pulse.schedule_model import Backfill, BackfillState, FireEntry, Schedule
from orbit_server.scope import Scope
from orbit_server.store.base import Row, Tx, chunks, json_table_rows


@dataclass(frozen=True, slots=True)
class Position:
    """Where a pass leaves a schedule."""

    id: str
    next_fire_at: datetime | None
    due_at: datetime | None
    last_fire_at: datetime | None
    last_task_id: str | None
    queued_fire_at: datetime | None
    failure: str | None = None  # the pass could not plan it (None: it was planned)


def _scope(row: Row) -> Scope:
    return Scope(str(row["tenant"]), str(row["environment"]))


def schedule_from_row(row: Row) -> Schedule:
    return Schedule(
        id=str(row["id"]),
        scope=_scope(row),
        name=str(row["name"]),
        version=int(row["version"]),
        cron=row["cron"],
        timezone=str(row["timezone"]),
        interval_ms=None if row["interval_ms"] is None else int(row["interval_ms"]),
        task=msgspec.json.decode(str(row["task"])),
        catchup=str(row["catchup"]),
        catchup_max=int(row["catchup_max"]),
        overlap=str(row["overlap"]),
        start_at=row["start_at"],
        end_at=row["end_at"],
        paused=bool(row["paused"]),
        paused_reason=row["paused_reason"],
        next_fire_at=row["next_fire_at"],
        due_at=row["due_at"],
        last_fire_at=row["last_fire_at"],
        last_task_id=row["last_task_id"],
        queued_fire_at=row["queued_fire_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        failure=row["failure"],
    )


def _schedule_params(s: Schedule) -> dict[str, Any]:
    return {
        "id": s.id,
        "tenant": s.scope.tenant,
        "environment": s.scope.environment,
        "name": s.name,
        "version": s.version,
        "cron": s.cron,
        "timezone": s.timezone,
        "interval_ms": s.interval_ms,
        "task": msgspec.json.encode(s.task).decode(),
        "catchup": s.catchup,
        "catchup_max": s.catchup_max,
        "overlap": s.overlap,
        "start_at": s.start_at,
        "end_at": s.end_at,
        "paused": 1 if s.paused else 0,
        "paused_reason": s.paused_reason,
        "next_fire_at": s.next_fire_at,
        "due_at": s.due_at,
        "last_fire_at": s.last_fire_at,
        "last_task_id": s.last_task_id,
        "queued_fire_at": s.queued_fire_at,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        "failure": s.failure,
    }


async def schedule_insert(tx: Tx, schedule: Schedule) -> None:
    """Raises ``DuplicateKey`` when the scope has a schedule of that name."""
    await tx.execute("schedule_insert", _schedule_params(schedule))


async def schedule_get(tx: Tx, scope: Scope, name: str, *, lock: bool = False) -> Schedule | None:
    """The scope's schedule of that name; ``lock`` holds its row until the transaction ends."""
    row = await tx.fetch_one(
        "schedule_lock" if lock else "schedule_get",
        {"tenant": scope.tenant, "environment": scope.environment, "name": name},
    )
    return None if row is None else schedule_from_row(row)


async def schedule_lock_by_id(tx: Tx, schedule_id: str) -> Schedule | None:
    """The schedule, its row held until the transaction ends."""
    row = await tx.fetch_one("schedule_lock_by_id", {"id": schedule_id})
    return None if row is None else schedule_from_row(row)


async def schedules_list(tx: Tx, scope: Scope, *, after: str | None, limit: int) -> list[Schedule]:
    rows = await tx.fetch_all(
        "schedules_list",
        {
            "tenant": scope.tenant,
            "environment": scope.environment,
            "after": after or "",
            "limit": limit,
        },
    )
    return [schedule_from_row(r) for r in rows]


async def schedule_update(tx: Tx, schedule: Schedule) -> None:
    """Write every changeable column of the schedule (by id)."""
    await tx.execute("schedule_update", _schedule_params(schedule))


async def schedule_delete(tx: Tx, schedule_id: str) -> bool:
    return await tx.execute("schedule_delete", {"id": schedule_id}) > 0


async def schedules_due_lock(tx: Tx, now: datetime, *, limit: int) -> list[Schedule]:
    """Up to ``limit`` schedules due at ``now``, oldest due first, locked; on MySQL/MariaDB
    rows locked by another transaction are passed over."""
    rows = await tx.fetch_all("schedules_due_lock", {"now": now, "limit": limit})
    return [schedule_from_row(r) for r in rows]


async def schedules_advance(tx: Tx, positions: Sequence[Position], now: datetime) -> None:
    """Move each schedule to its new position: one statement on MySQL/MariaDB."""
    if not positions:
        return
    if tx.dialect == "mysql":
        rows = [
            {"id": p.id, "next_fire_at": p.next_fire_at, "due_at": p.due_at,
             "last_fire_at": p.last_fire_at, "last_task_id": p.last_task_id,
             "queued_fire_at": p.queued_fire_at, "failure": p.failure}
            for p in positions
        ]  # fmt: skip
        await tx.execute("schedules_advance", {"rows_json": json_table_rows(rows), "now": now})
        return
    await tx.execute_many(
        "schedules_advance",
        [
            {
                "id": p.id,
                "next_fire_at": p.next_fire_at,
                "due_at": p.due_at,
                "last_fire_at": p.last_fire_at,
                "last_task_id": p.last_task_id,
                "queued_fire_at": p.queued_fire_at,
                "failure": p.failure,
                "now": now,
            }
            for p in positions
        ],
    )


async def schedules_due_times(tx: Tx, *, limit: int) -> list[datetime]:
    """The earliest ``limit`` times at which a schedule is due, in order."""
    rows = await tx.fetch_all("schedules_due_times", {"limit": limit})
    return [r["due_at"] for r in rows]


# -- the fire ledger ----------------------------------------------------------------------------


def fire_from_row(row: Row) -> FireEntry:
    return FireEntry(
        schedule_id=str(row["schedule_id"]),
        fire_at=row["fire_at"],
        planned=bool(row["planned"]),
        scope=_scope(row),
        schedule=str(row["schedule"]),
        outcome=str(row["outcome"]),
        cause=str(row["cause"]),
        task_id=row["task_id"],
        recorded_at=row["recorded_at"],
    )


def _fire_params(f: FireEntry) -> dict[str, Any]:
    return {
        "schedule_id": f.schedule_id,
        "fire_at": f.fire_at,
        "planned": 1 if f.planned else 0,
        "tenant": f.scope.tenant,
        "environment": f.scope.environment,
        "schedule": f.schedule,
        "outcome": f.outcome,
        "cause": f.cause,
        "task_id": f.task_id,
        "recorded_at": f.recorded_at,
    }


async def fires_insert(tx: Tx, fires: Sequence[FireEntry]) -> None:
    """Raises ``DuplicateKey`` when a slot is in the ledger already (one multi-row insert)."""
    await tx.execute_many("fire_insert", [_fire_params(f) for f in fires])


async def fire_update(tx: Tx, fire: FireEntry) -> bool:
    """A slot's new outcome, cause and task (a queued slot fired, a slot fired by backfill)."""
    return await tx.execute("fire_update", _fire_params(fire)) > 0


async def fires_newest(
    tx: Tx, schedule_id: str, *, before: datetime | None, limit: int
) -> list[FireEntry]:
    """The ledger of a schedule, newest first, from before ``before``."""
    rows = await tx.fetch_all(
        "fires_newest",
        {"schedule_id": schedule_id, "before": before or _FAR_FUTURE, "limit": limit},
    )
    return [fire_from_row(r) for r in rows]


_FAR_FUTURE = datetime.fromisoformat("9999-12-31T00:00:00+00:00")
UNION_PARTS = 100  # schedules whose newest entries one statement reads


async def fires_newest_of(
    tx: Tx, schedule_ids: Sequence[str], *, limit: int
) -> dict[str, list[FireEntry]]:
    """The newest ``limit`` ledger entries of each schedule, newest first: one statement for
    up to a hundred schedules, each part an index range of its own."""
    found: dict[str, list[FireEntry]] = {i: [] for i in schedule_ids}
    for part in chunks(schedule_ids, UNION_PARTS):
        many = [{"schedule_id": i, "before": _FAR_FUTURE, "limit": limit} for i in part]
        for row in await tx.fetch_union("fires_newest", many):
            fire = fire_from_row(row)
            found[fire.schedule_id].append(fire)
    return found


async def fires_last_planned(tx: Tx, schedule_id: str) -> datetime | None:
    """The newest slot of the timing that the schedule's ledger has (read only when a change
    replans a schedule: the index range of all its rows)."""
    row = await tx.fetch_one("fires_last_planned", {"schedule_id": schedule_id})
    return None if row is None else row["fire_at"]  # MAX of no rows is NULL


async def fires_between(
    tx: Tx, schedule_id: str, first: datetime, last: datetime
) -> dict[datetime, FireEntry]:
    """The ledger's planned slots from ``first`` to ``last`` (both included), by fire time."""
    rows = await tx.fetch_all(
        "fires_between", {"schedule_id": schedule_id, "first": first, "last": last}
    )
    return {f.fire_at: f for f in map(fire_from_row, rows)}


async def fires_prune(tx: Tx, before: datetime, *, limit: int) -> int:
    """Delete up to ``limit`` ledger rows recorded before ``before``, oldest first; a
    ``queued`` slot's row stays until the slot is decided."""
    return await tx.execute("fires_prune", {"before": before, "limit": limit})


# -- backfills ----------------------------------------------------------------------------------


def backfill_from_row(row: Row) -> Backfill:
    return Backfill(
        id=str(row["id"]),
        schedule_id=str(row["schedule_id"]),
        scope=_scope(row),
        schedule=str(row["schedule"]),
        from_at=row["from_at"],
        to_at=row["to_at"],
        cursor_at=row["cursor_at"],
        state=BackfillState(row["state"]),
        fired=int(row["fired"]),
        existing=int(row["existing"]),
        created_at=row["created_at"],
        finished_at=row["finished_at"],
        failure=row["failure"],
    )


def _backfill_params(b: Backfill) -> dict[str, Any]:
    return {
        "id": b.id,
        "schedule_id": b.schedule_id,
        "tenant": b.scope.tenant,
        "environment": b.scope.environment,
        "schedule": b.schedule,
        "from_at": b.from_at,
        "to_at": b.to_at,
        "cursor_at": b.cursor_at,
        "state": b.state,
        "fired": b.fired,
        "existing": b.existing,
        "created_at": b.created_at,
        "finished_at": b.finished_at,
        "failure": b.failure,
    }


async def backfill_insert(tx: Tx, backfill: Backfill) -> None:
    await tx.execute("backfill_insert", _backfill_params(backfill))


async def backfill_get(tx: Tx, schedule_id: str, backfill_id: str) -> Backfill | None:
    row = await tx.fetch_one("backfill_get", {"id": backfill_id, "schedule_id": schedule_id})
    return None if row is None else backfill_from_row(row)


async def backfills_of(tx: Tx, schedule_id: str, *, limit: int) -> list[Backfill]:
    """A schedule's backfills, newest first."""
    rows = await tx.fetch_all("backfills_of", {"schedule_id": schedule_id, "limit": limit})
    return [backfill_from_row(r) for r in rows]


async def backfill_update(tx: Tx, backfill: Backfill) -> None:
    """Write a backfill's progress: cursor, state, counts, finish time, failure."""
    await tx.execute("backfill_update", _backfill_params(backfill))


async def backfills_running_lock(tx: Tx, *, limit: int) -> list[Backfill]:
    """Up to ``limit`` running backfills, oldest first, locked (others' passed over)."""
    rows = await tx.fetch_all("backfills_running_lock", {"limit": limit})
    return [backfill_from_row(r) for r in rows]
