"""Store methods of worker sessions: one row per worker connection and the queues it serves
(a lease moves to the session a worker reconnected with in ``tasks.task_adopt``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from orbit_server.scope import Scope
from orbit_server.store.base import Tx


@dataclass(frozen=True, slots=True)
class SessionRecord:
    id: str
    scope: Scope
    node: str
    worker_id: str
    key_id: str
    capacity: int
    handlers: list[dict[str, Any]]
    connected_at: datetime
    last_seen_at: datetime
    closed_at: datetime | None
    sdk: str | None = None
    protocol: int | None = None
    end_reason: str | None = None


@dataclass(frozen=True, slots=True)
class HeldAttempt:
    """An attempt a session holds now (its task is leased or running)."""

    task_id: str
    queue: str
    type: str
    state: str
    attempt: int
    leased_at: datetime | None
    started_at: datetime | None
    lease_expires_at: datetime | None


@dataclass(frozen=True, slots=True)
class NewSession:
    """A worker connection as ``session_insert`` records it, open from ``now``."""

    id: str
    scope: Scope
    node: str
    worker_id: str
    key_id: str
    capacity: int
    handlers: list[dict[str, Any]]
    sdk: str | None = None
    protocol: int | None = None


async def session_insert(tx: Tx, session: NewSession, now: datetime) -> None:
    """A new open session and one row per queue it serves."""
    where = {"tenant": session.scope.tenant, "environment": session.scope.environment}
    await tx.execute(
        "session_insert",
        {
            **where,
            "id": session.id,
            "node": session.node,
            "worker_id": session.worker_id,
            "key_id": session.key_id,
            "capacity": session.capacity,
            "handlers": msgspec.json.encode(session.handlers).decode(),
            "sdk": session.sdk,
            "protocol": session.protocol,
            "now": now,
        },
    )
    await tx.execute_many(
        "session_queue_insert",
        [
            {**where, "queue": q, "session_id": session.id}
            for q in sorted({str(h["queue"]) for h in session.handlers})
        ],
    )


async def session_get(tx: Tx, session_id: str) -> SessionRecord | None:
    row = await tx.fetch_one("session_get", {"id": session_id})
    return None if row is None else _record(row)


def _record(row: dict[str, Any]) -> SessionRecord:
    return SessionRecord(
        id=str(row["id"]),
        scope=Scope(str(row["tenant"]), str(row["environment"])),
        node=str(row["node"]),
        worker_id=str(row["worker_id"]),
        key_id=str(row["key_id"]),
        capacity=int(row["capacity"]),
        handlers=msgspec.json.decode(row["handlers"]),
        connected_at=row["connected_at"],
        last_seen_at=row["last_seen_at"],
        closed_at=row["closed_at"],
        sdk=row["sdk"],
        protocol=None if row["protocol"] is None else int(row["protocol"]),
        end_reason=row["end_reason"],
    )


async def session_close(tx: Tx, session_id: str, now: datetime, reason: str) -> bool:
    """End an open session, saying why (``drain``, ``worker_stopped``, ``lost``, …)."""
    return await tx.execute("session_close", {"id": session_id, "now": now, "reason": reason}) == 1


async def sessions_replace(
    tx: Tx, scope: Scope, worker_id: str, seen_before: datetime, now: datetime
) -> int:
    """End the open sessions of ``worker_id`` that their node stopped refreshing before
    ``seen_before``: the worker came back on a new one."""
    return await tx.execute(
        "sessions_replace",
        {
            "tenant": scope.tenant,
            "environment": scope.environment,
            "worker_id": worker_id,
            "seen_before": seen_before,
            "now": now,
        },
    )


async def sessions_list(
    tx: Tx,
    scope: Scope,
    *,
    ended_after: datetime,
    queue: str | None,
    before: str,
    limit: int,
) -> list[SessionRecord]:
    """Newest first: the open sessions and those that ended after ``ended_after``."""
    rows = await tx.fetch_all(
        "sessions_list",
        {
            "tenant": scope.tenant,
            "environment": scope.environment,
            "ended_after": ended_after,
            "any_queue": 1 if queue is None else 0,
            "queue": queue or "",
            "before": before,
            "limit": limit,
        },
    )
    return [_record(r) for r in rows]


async def sessions_held_counts(tx: Tx, session_ids: Sequence[str]) -> dict[str, int]:
    """How many leased or running tasks each session holds (absent: none)."""
    if not session_ids:
        return {}
    rows = await tx.fetch_all("sessions_held_counts", {"ids": list(session_ids)})
    return {str(r["session_id"]): int(r["n"]) for r in rows}


async def session_held_attempts(tx: Tx, session_id: str, *, limit: int) -> list[HeldAttempt]:
    rows = await tx.fetch_all("session_held_attempts", {"id": session_id, "limit": limit})
    return [
        HeldAttempt(
            task_id=str(r["task_id"]),
            queue=str(r["queue"]),
            type=str(r["type"]),
            state=str(r["state"]),
            attempt=int(r["attempt"]),
            leased_at=r["leased_at"],
            started_at=r["started_at"],
            lease_expires_at=r["lease_expires_at"],
        )
        for r in rows
    ]


async def sessions_open_handlers(
    tx: Tx, scope: Scope, seen_after: datetime
) -> list[list[dict[str, Any]]]:
    """The handlers of each open session of ``scope`` seen since ``seen_after``."""
    rows = await tx.fetch_all(
        "sessions_open_handlers",
        {"tenant": scope.tenant, "environment": scope.environment, "seen_after": seen_after},
    )
    return [msgspec.json.decode(r["handlers"]) for r in rows]


async def sessions_close_node(tx: Tx, node: str, now: datetime) -> int:
    """Close every session a node left open (it restarted, so those connections are gone)."""
    return await tx.execute("sessions_close_node", {"node": node, "now": now})


async def sessions_touch_node(tx: Tx, node: str, now: datetime) -> int:
    """The node is alive: its open sessions were seen now."""
    return await tx.execute("sessions_touch_node", {"node": node, "now": now})


async def sessions_per_queue(tx: Tx, scope: Scope, seen_after: datetime) -> dict[str, int]:
    """Open sessions seen since ``seen_after``, counted per queue they serve."""
    rows = await tx.fetch_all(
        "sessions_per_queue",
        {"tenant": scope.tenant, "environment": scope.environment, "seen_after": seen_after},
    )
    return {str(r["queue"]): int(r["n"]) for r in rows}


async def sessions_prune(tx: Tx, before: datetime, *, limit: int) -> int:
    """Delete up to ``limit`` sessions closed before ``before``."""
    rows = await tx.fetch_all("sessions_closed_before", {"before": before, "limit": limit})
    ids = [str(r["id"]) for r in rows]
    if not ids:
        return 0
    await tx.execute("session_queues_delete", {"ids": ids})
    return await tx.execute("sessions_delete", {"ids": ids})
