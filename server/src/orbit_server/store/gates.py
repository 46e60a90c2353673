"""Store methods of gates: a row per gate that a workflow opens and closes in front of its
tasks (decision 0015), read under a shared lock by whoever admits or starts them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from orbit_server.pulse.model import Gate
from orbit_server.scope import Scope
from orbit_server.store.base import Tx, row_scope, scope_params


async def gate_create(tx: Tx, scope: Scope, gate_id: str, now: datetime) -> None:
    await tx.execute("gate_insert", {**scope_params(scope), "id": gate_id, "now": now})


async def gate_set(tx: Tx, scope: Scope, gate_id: str, *, open_: bool, now: datetime) -> bool:
    """Open or close a gate and bump its version; the row lock orders it against claims."""
    changed = await tx.execute(
        "gate_set", {**scope_params(scope), "id": gate_id, "open": int(open_), "now": now}
    )
    return changed == 1


async def gate_get(tx: Tx, scope: Scope, gate_id: str, *, lock: bool = False) -> Gate | None:
    """One gate; ``lock`` holds its row exclusively (what opening and closing do)."""
    row = await tx.fetch_one(
        "gate_lock" if lock else "gate_get", {**scope_params(scope), "id": gate_id}
    )
    if row is None:
        return None
    return Gate(
        id=str(row["id"]),
        scope=row_scope(row),
        open=bool(row["open"]),
        version=int(row["version"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


async def gate_delete(tx: Tx, gate_id: str) -> None:
    await tx.execute("gate_delete", {"id": gate_id})


async def gates_open(tx: Tx, gate_ids: Sequence[str]) -> dict[str, bool]:
    """Whether each gate is open, read under a shared lock that a closer must wait for."""
    if not gate_ids:
        return {}
    rows = await tx.fetch_all("gates_read_shared", {"gate_ids": sorted(set(gate_ids))})
    found = {str(r["id"]): bool(r["open"]) for r in rows}
    return {g: found.get(g, False) for g in gate_ids}  # a missing gate is closed
