"""Store methods of worker sessions: one row per worker connection and the queues it serves
(a lease moves to the session a worker reconnected with in ``tasks.task_adopt``)."""

from __future__ import annotations

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
    if row is None:
        return None
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
    )


async def session_close(tx: Tx, session_id: str, now: datetime) -> bool:
    return await tx.execute("session_close", {"id": session_id, "now": now}) == 1


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
