"""Store methods of workflow signals (decision 0015): what was sent to an instance, pending
until a step that waits for it takes it."""

from __future__ import annotations

from datetime import datetime

from orbit_server.store.base import Row, Tx, json_value
from orbit_server.store.base import json_or_none as _json
from orbit_server.weave.model import Signal
from orbit_server.weave.states import SignalState


def _signal(row: Row) -> Signal:
    return Signal(
        id=str(row["id"]),
        workflow_id=str(row["workflow_id"]),
        name=str(row["name"]),
        payload=json_value(row["payload"]),
        idempotency_key=row["idempotency_key"],
        state=SignalState(row["state"]),
        step_key=row["step_key"],
        created_at=row["created_at"],
        delivered_at=row["delivered_at"],
    )


async def workflow_signal_insert(tx: Tx, signal: Signal) -> None:
    """Raises ``DuplicateKey`` when the instance has a signal with the idempotency key."""
    await tx.execute(
        "workflow_signal_insert",
        {"id": signal.id, "workflow_id": signal.workflow_id, "name": signal.name,
         "payload": _json(signal.payload), "idempotency_key": signal.idempotency_key,
         "state": signal.state, "step_key": signal.step_key, "created_at": signal.created_at,
         "delivered_at": signal.delivered_at},
    )  # fmt: skip


async def workflow_signal_get_by_key(tx: Tx, workflow_id: str, key: str) -> Signal | None:
    row = await tx.fetch_one(
        "workflow_signal_get_by_key", {"workflow_id": workflow_id, "idempotency_key": key}
    )
    return None if row is None else _signal(row)


async def workflow_signal_oldest_pending(tx: Tx, workflow_id: str, name: str) -> Signal | None:
    row = await tx.fetch_one(
        "workflow_signal_oldest_pending", {"workflow_id": workflow_id, "name": name}
    )
    return None if row is None else _signal(row)


async def workflow_signal_deliver(tx: Tx, signal_id: str, step_key: str, now: datetime) -> bool:
    return (
        await tx.execute(
            "workflow_signal_deliver", {"id": signal_id, "step_key": step_key, "now": now}
        )
        == 1
    )


async def workflow_signals_pending(tx: Tx, workflow_id: str, *, limit: int) -> list[Signal]:
    rows = await tx.fetch_all(
        "workflow_signals_pending", {"workflow_id": workflow_id, "limit": limit}
    )
    return [_signal(r) for r in rows]


async def workflow_signals_delete(tx: Tx, workflow_id: str) -> int:
    """Delete every signal of an instance (it is being pruned)."""
    return await tx.execute("workflow_signals_delete", {"workflow_id": workflow_id})
