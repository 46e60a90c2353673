"""Pulse's domain events: what a committed unit of work changed, for this node's waiters.

Units record them with ``tx.publish``; the node's bus delivers them after COMMIT (see
:mod:`orbit_server.store.events`). Each is named for what happened, and each is only a
shortcut: other nodes' changes are found by their own periodic reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from orbit_server.scope import Scope
from orbit_server.store.admissions import AdmissionNote


@dataclass(frozen=True, slots=True)
class WorkCommitted:
    """Claimable work entered a queue (a submit, a promotion, a reopened gate, a retry)."""

    scope: Scope
    queue: str


@dataclass(frozen=True, slots=True)
class RoomMade:
    """Leased or running work of a queue ended: room under a limit, a key's next task."""

    scope: Scope
    queue: str


@dataclass(frozen=True, slots=True)
class TaskSettled:
    """A task reached a terminal state or needs_review, and its result event was written."""

    task_id: str


@dataclass(frozen=True, slots=True)
class CancelRequested:
    """Someone asked running work to stop."""

    task_id: str
    reason: str | None


@dataclass(frozen=True, slots=True)
class KeysLeftToAdmit:
    """A large submit left its concurrency keys to be admitted after its commit (0012)."""

    note: AdmissionNote


class Milestone(StrEnum):
    """What happened to a task, as the node's metrics count it."""

    SUBMITTED = "submitted"
    STARTED = "started"  # an attempt started running (an eager one with its first report)
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    RETRIED = "retried"  # a failed or lost attempt that will run again
    EXPIRED = "expired"  # an attempt's lease ended without a result (whatever follows)
    NEEDS_REVIEW = "needs_review"


@dataclass(frozen=True, slots=True)
class TasksPassed:
    """``count`` tasks of a queue (of any scope) passed ``milestone`` in one committed unit."""

    queue: str
    milestone: Milestone
    count: int
