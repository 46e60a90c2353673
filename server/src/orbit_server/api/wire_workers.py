"""Wire types of the workers view (``GET /v1/workers``) and of unserved work."""

from __future__ import annotations

from datetime import datetime

import msgspec

from orbit_server.clock import to_rfc3339
from orbit_server.pulse.workers import HeldView, Unserved, WorkerView


class Handler(msgspec.Struct):
    queue: str
    type: str
    versions: list[str]


class HeldAttempt(msgspec.Struct):
    task_id: str
    queue: str
    type: str
    state: str
    attempt: int
    leased_at: str | None
    started_at: str | None
    lease_expires_at: str | None

    @classmethod
    def of(cls, held: HeldView) -> HeldAttempt:
        return cls(
            task_id=held.task_id,
            queue=held.queue,
            type=held.type,
            state=held.state,
            attempt=held.attempt,
            leased_at=to_rfc3339(held.leased_at),
            started_at=to_rfc3339(held.started_at),
            lease_expires_at=to_rfc3339(held.lease_expires_at),
        )


class Worker(msgspec.Struct, omit_defaults=True):
    session_id: str
    worker_id: str
    node: str
    status: str
    connected_at: str
    last_heartbeat_at: str
    ended_at: str | None
    end_reason: str | None
    sdk: str | None
    protocol: int | None
    capacity: int
    held: int
    handlers: list[Handler]
    attempts: list[HeldAttempt] | None = None

    @classmethod
    def of(cls, view: WorkerView) -> Worker:
        return cls(
            session_id=view.session_id,
            worker_id=view.worker_id,
            node=view.node,
            status=view.status,
            connected_at=to_rfc3339(view.connected_at) or "",
            last_heartbeat_at=to_rfc3339(view.last_seen_at) or "",
            ended_at=to_rfc3339(view.ended_at),
            end_reason=view.end_reason,
            sdk=view.sdk,
            protocol=view.protocol,
            capacity=view.capacity,
            held=view.held,
            handlers=[Handler(h.queue, h.type, list(h.versions)) for h in view.handlers],
            attempts=None if view.attempts is None else [HeldAttempt.of(a) for a in view.attempts],
        )


class WorkerList(msgspec.Struct):
    items: list[Worker]
    next_cursor: str | None


class UnservedGroup(msgspec.Struct):
    """Claimable tasks of one type and handler version that no connected worker could take."""

    queue: str
    type: str
    version: str | None
    pending: int
    oldest_age_ms: int
    reason: str

    @classmethod
    def of(cls, group: Unserved, now: datetime) -> UnservedGroup:
        age = max(0, int((now - group.oldest_run_at).total_seconds() * 1000))
        return cls(group.queue, group.type, group.version, group.pending, age, group.reason)
