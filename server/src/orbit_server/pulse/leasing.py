"""What the worker side of Pulse trades in: who holds leases, what they want, the leases,
and the verdicts on their starts, renewals and results (values only; ``worker.py`` has the
service that makes them)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from orbit_server.pulse.model import LockedTask, Task
from orbit_server.pulse.states import Event


@dataclass(frozen=True, slots=True)
class Session:
    """Who holds leases: a worker connection on a node."""

    session_id: str
    node: str
    worker_id: str


@dataclass(frozen=True, slots=True)
class Want:
    """Free capacity of a session for one (queue, type); ``versions`` empty = any version."""

    queue: str
    type: str
    free: int
    versions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """One session's share of a node's claim: its wants and how many it may take."""

    session: Session
    wants: tuple[Want, ...]
    limit: int


@dataclass(frozen=True, slots=True)
class LeaseRef:
    """A lease's identity (SPEC P2): the task, the attempt (lease epoch), the secret token the
    lease was granted with, and the session holding it. Every holder operation is fenced on all
    four: a reference that is stale, foreign or guessed answers alike and changes nothing."""

    task_id: str
    attempt: int
    lease_token: str
    session_id: str


@dataclass(frozen=True, slots=True)
class Lease:
    ref: LeaseRef
    task: Task
    expires_at: datetime


class StartVerdict(StrEnum):
    STARTED = "started"
    DENIED_GATE = "denied_gate"  # the task's gate closed after the claim: back to pending
    STALE = "stale"  # the lease no longer holds (cancelled, expired, re-claimed)


class RenewVerdict(StrEnum):
    RENEWED = "renewed"
    CANCEL_REQUESTED = "cancel_requested"  # renewed, and the worker should stop cooperatively
    STALE = "stale"


class Outcome(StrEnum):
    ACCEPTED = "accepted"
    ALREADY = "already"  # a resend of a result this attempt already reported: acknowledge
    STALE = "stale"


@dataclass(frozen=True, slots=True)
class Report:
    """A worker's result for one attempt: ``event`` COMPLETE or CANCELLED_BY_WORKER, or None
    for a failure (``error``, ``retryable``)."""

    ref: LeaseRef
    event: Event | None
    result: Any = None
    error: dict[str, Any] | None = None
    retryable: bool = True


@dataclass(frozen=True, slots=True)
class StartAnswer:
    ref: LeaseRef
    verdict: StartVerdict
    expires_at: datetime | None = None  # when STARTED: the lease's end and the attempt's deadline
    deadline_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Renew:
    """One item of a heartbeat: a lease to extend and, when its handler reported progress
    since the previous heartbeat, that progress (the JSON text of an object, its size checked
    by whoever decoded it)."""

    ref: LeaseRef
    progress: str | None = None


@dataclass(frozen=True, slots=True)
class Renewal:
    ref: LeaseRef
    verdict: RenewVerdict
    expires_at: datetime | None


def starts_eagerly(task: Task | LockedTask) -> bool:
    """Whether an attempt of ``task`` may run before its start is confirmed: nothing but a lost
    lease can refuse the start of idempotent work without a gate (decisions 0007, 0008)."""
    return task.side_effect == "idempotent" and task.gate_id is None
