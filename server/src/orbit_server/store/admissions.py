"""Store methods of admission notes: the concurrency keys a submit admits after its commit
(decision 0012), one row per submit and queue, deleted once they are admitted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import msgspec

from orbit_server.scope import Scope
from orbit_server.store.base import Tx


@dataclass(frozen=True, slots=True)
class AdmissionNote:
    id: str
    scope: Scope
    queue: str
    keys: tuple[str, ...]
    created_at: datetime


async def admission_note_insert(
    tx: Tx, note_id: str, scope: Scope, queue: str, keys: Sequence[str], now: datetime
) -> None:
    await tx.execute(
        "admission_note_insert",
        {
            "id": note_id,
            "tenant": scope.tenant,
            "environment": scope.environment,
            "queue": queue,
            "concurrency_keys": msgspec.json.encode(sorted(keys)).decode(),
            "now": now,
        },
    )


async def admission_note_delete(tx: Tx, note_id: str) -> bool:
    return await tx.execute("admission_note_delete", {"id": note_id}) > 0


async def admission_notes_older(tx: Tx, before: datetime, *, limit: int) -> list[AdmissionNote]:
    """Notes written at or before ``before``, oldest first."""
    rows = await tx.fetch_all("admission_notes_older", {"before": before, "limit": limit})
    return [
        AdmissionNote(
            id=str(r["id"]),
            scope=Scope(str(r["tenant"]), str(r["environment"])),
            queue=str(r["queue"]),
            keys=tuple(msgspec.json.decode(str(r["concurrency_keys"]), type=list[str])),
            created_at=r["created_at"],
        )
        for r in rows
    ]
