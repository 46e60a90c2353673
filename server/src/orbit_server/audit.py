"""The audit trail of control operations (SPEC G5), written inside the caller's transaction.

Shared by every module that performs control operations (keys, tasks, queues, workflows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orbit_server.clock import Clock
from orbit_server.governance.model import AuditEntry
from orbit_server.ids import new_id
from orbit_server.scope import Scope
from orbit_server.store import Tx
from orbit_server.store import governance as gov


@dataclass(frozen=True, slots=True)
class Actor:
    """Who performs a control operation, for the audit log."""

    name: str
    request_id: str | None = None


class AuditWriter:
    """Writes audit records inside the caller's transaction, so they commit with the change."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    async def record(
        self,
        tx: Tx,
        *,
        scope: Scope,
        actor: Actor,
        action: str,
        target_kind: str,
        target_id: str,
        details: dict[str, Any] | None = None,
    ) -> AuditEntry:
        record = AuditEntry(
            id=new_id("aud_"),
            scope=scope,
            actor=actor.name,
            action=action,
            target_kind=target_kind,
            target_id=target_id,
            details=details or {},
            request_id=actor.request_id,
            created_at=self._clock.now(),
        )
        await gov.audit_insert(tx, record)
        return record
