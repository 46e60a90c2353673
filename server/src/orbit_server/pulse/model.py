"""What a submission asks for, validated (SPEC P1), and how a task is built from it. Pure."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from orbit_server.pulse.retry import RetryPolicy
from orbit_server.pulse.states import AttemptState, SideEffect, TaskState
from orbit_server.scope import Scope


@dataclass(frozen=True, slots=True)
class Owner:
    """The generic correlation of a task to what owns it (Pulse never interprets it)."""

    kind: str
    id: str
    step: str | None = None


@dataclass(frozen=True, slots=True)
class TaskSpec:
    queue: str
    type: str
    params: Any = field(default_factory=dict)
    idempotency_key: str | None = None
    priority: int = 0
    delay_ms: int = 0
    run_at: datetime | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout_ms: int | None = None
    concurrency_key: str | None = None
    fairness_key: str | None = None
    side_effect: SideEffect = SideEffect.IDEMPOTENT
    handler_version: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    owner: Owner | None = None
    gate_id: str | None = None
    traceparent: str | None = None

    def request_hash(self, default_timeout_ms: int) -> str:
        """A digest of everything the caller asked for, after defaults and time zones are
        resolved: the same request replays, another conflicts. The trace context is not part
        of the request's meaning."""
        body = asdict(self)
        body.pop("traceparent")
        body["timeout_ms"] = self.timeout_ms or default_timeout_ms
        if self.run_at is not None:
            body["run_at"] = self.run_at.astimezone(UTC).isoformat()
        encoded = msgspec.json.encode(body, order="sorted", enc_hook=str)
        return hashlib.sha256(encoded).hexdigest()


def start_time(spec: TaskSpec, now: datetime) -> datetime:
    """When the task may first run: ``run_at``, else now plus ``delay_ms``."""
    if spec.run_at is not None:
        return spec.run_at
    return now + timedelta(milliseconds=spec.delay_ms)


def new_task(
    spec: TaskSpec, *, task_id: str, scope: Scope, now: datetime, default_timeout_ms: int
) -> Task:
    run_at = start_time(spec, now)
    state = TaskState.SCHEDULED if run_at > now else TaskState.PENDING
    owner = spec.owner
    return Task(
        id=task_id,
        scope=scope,
        queue=spec.queue,
        type=spec.type,
        state=state,
        params=spec.params,
        priority=spec.priority,
        run_at=run_at if run_at > now else now,
        attempts=0,
        max_attempts=spec.retry.max_attempts,
        initial_backoff_ms=spec.retry.initial_backoff_ms,
        backoff_multiplier=spec.retry.backoff_multiplier,
        max_backoff_ms=spec.retry.max_backoff_ms,
        timeout_ms=spec.timeout_ms or default_timeout_ms,
        idempotency_key=spec.idempotency_key,
        request_hash=spec.request_hash(default_timeout_ms) if spec.idempotency_key else None,
        concurrency_key=spec.concurrency_key,
        fairness_key=spec.fairness_key,
        side_effect=SideEffect(spec.side_effect),
        handler_version=spec.handler_version,
        labels=dict(spec.labels),
        owner_kind=owner.kind if owner else None,
        owner_id=owner.id if owner else None,
        owner_step=owner.step if owner else None,
        gate_id=spec.gate_id,
        traceparent=spec.traceparent,
        result=None,
        error=None,
        cancel_requested=False,
        cancel_reason=None,
        lease_epoch=0,
        event_seq=0,
        lease_token=None,
        lease_expires_at=None,
        session_id=None,
        node=None,
        worker_id=None,
        created_at=now,
        updated_at=now,
        finished_at=None,
    )


@dataclass(frozen=True, slots=True)
class Task:
    id: str
    scope: Scope
    queue: str
    type: str
    state: TaskState
    params: Any
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int
    initial_backoff_ms: int
    backoff_multiplier: float
    max_backoff_ms: int
    timeout_ms: int
    idempotency_key: str | None
    request_hash: str | None
    concurrency_key: str | None
    fairness_key: str | None
    side_effect: SideEffect
    handler_version: str | None
    labels: dict[str, str]
    owner_kind: str | None
    owner_id: str | None
    owner_step: str | None
    gate_id: str | None
    traceparent: str | None
    result: Any
    error: dict[str, Any] | None
    cancel_requested: bool
    cancel_reason: str | None
    lease_epoch: int
    event_seq: int
    lease_token: str | None
    lease_expires_at: datetime | None
    session_id: str | None
    node: str | None
    worker_id: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    deadline_at: datetime | None = None  # start + timeout_ms of the running attempt
    # What owns the task, named and versioned (a workflow's definition and version): read with
    # a lease for its delivery (``tasks_lease_many``), None elsewhere.
    owner_name: str | None = None
    owner_version: str | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    task_id: str
    number: int
    state: AttemptState
    cause: str | None
    worker_id: str | None
    session_id: str | None
    node: str | None
    leased_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    lease_expires_at: datetime | None
    error: dict[str, Any] | None
    progress: dict[str, Any] | None = None  # what its handler last reported (ctx.progress)
    progress_at: datetime | None = None  # when that report was recorded


@dataclass(frozen=True, slots=True)
class Queue:
    scope: Scope
    name: str
    paused: bool
    concurrency_limit: int | None
    key_concurrency: int
    max_pending: int | None
    pending: int  # scheduled + pending
    active: int  # leased + running
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ResultEvent:
    id: str
    scope: Scope
    task_id: str
    attempt: int
    state: TaskState  # the state the task settled in
    owner_kind: str | None
    owner_id: str | None
    created_at: datetime
    seq: int = 0  # the task's n-th event; with task_id it makes the event unique


@dataclass(frozen=True, slots=True)
class LockedTask:
    """What the bulk start and result paths read of a locked task row: its lease (the fence),
    state and what the transition writes besides the row — not the params or the result."""

    id: str
    scope: Scope
    queue: str
    state: TaskState
    lease_epoch: int
    lease_token: str | None
    session_id: str | None
    lease_expires_at: datetime | None
    deadline_at: datetime | None
    cancel_requested: bool
    gate_id: str | None
    timeout_ms: int
    concurrency_key: str | None
    owner_kind: str | None
    owner_id: str | None
    event_seq: int
    side_effect: SideEffect


@dataclass(frozen=True, slots=True)
class Gate:
    id: str
    scope: Scope
    open: bool
    version: int
    created_at: datetime
    updated_at: datetime


# -- bulk operations (decision 0025) ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BulkRecord:
    id: str
    scope: Scope
    kind: str
    action: str
    filter: dict[str, Any]
    params: dict[str, Any]
    state: str
    matched: int
    done: int
    skipped: int
    failed: int
    skipped_reasons: dict[str, int]
    created_by: str
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class BulkItem:
    seq: int
    target_id: str
    state: str
    reason: str | None


@dataclass(frozen=True, slots=True)
class Settled:
    """How one item of a step ended: ``done``, ``skipped`` or ``failed``, and why."""

    seq: int
    state: str
    reason: str | None


@dataclass(frozen=True, slots=True)
class TaskSelection:
    """The column filters of a task selection (None: any)."""

    queue: str | None = None
    states: tuple[str, ...] | None = None
    type: str | None = None
    ids: tuple[str, ...] | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    finished_from: datetime | None = None
    finished_to: datetime | None = None


@dataclass(frozen=True, slots=True)
class SelectedTask:
    id: str
    state: str
    labels: dict[str, str]
    error_code: str | None
