"""Wire models of the Tasks and Queues sections of API.md."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from orbit_server.api.wire import Request
from orbit_server.api.wire_workers import UnservedGroup
from orbit_server.clock import to_rfc3339
from orbit_server.pulse import model as pulse_model
from orbit_server.pulse.service import QueueView
from orbit_server.pulse.workers import Unserved

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[^\s]+$")]
# No leading or trailing blanks: MySQL-family collations ignore trailing spaces in comparisons,
# so "k" and "k " would be one key there and two on SQLite.
Key = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=r"^\S(.*\S)?$")]
MAX_BATCH = 1000


class RetryIn(Request):
    max_attempts: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 3
    initial_backoff_ms: Annotated[int, msgspec.Meta(ge=0, le=86_400_000)] = 1000
    backoff_multiplier: Annotated[float, msgspec.Meta(ge=1.0, le=100.0)] = 2.0
    max_backoff_ms: Annotated[int, msgspec.Meta(ge=0, le=86_400_000)] = 60_000


class TaskTemplate(Request):
    """What a task is, without when it first runs or its identity: a schedule's template,
    and the base of a submission."""

    queue: Name
    type: Name
    params: Any = msgspec.field(default_factory=dict)
    priority: Annotated[int, msgspec.Meta(ge=-1_000_000, le=1_000_000)] = 0
    retry: RetryIn | None = None
    timeout_ms: Annotated[int, msgspec.Meta(ge=1000)] | None = None
    concurrency_key: Key | None = None
    fairness_key: (
        Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^\S(.*\S)?$")] | None
    ) = None
    side_effect: Literal["idempotent", "unsafe"] = "idempotent"
    handler_version: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | None = None
    labels: Annotated[
        dict[
            Annotated[str, msgspec.Meta(min_length=1, max_length=64)],
            Annotated[str, msgspec.Meta(max_length=256)],
        ],
        msgspec.Meta(max_length=32),
    ] = msgspec.field(default_factory=dict)


class TaskSubmit(TaskTemplate):
    idempotency_key: Key | None = None
    delay_ms: Annotated[int, msgspec.Meta(ge=0, le=366 * 86_400_000)] = 0
    run_at: Annotated[datetime, msgspec.Meta(tz=True)] | None = None


class TaskBatch(Request):
    tasks: Annotated[list[TaskSubmit], msgspec.Meta(min_length=1, max_length=MAX_BATCH)]


class CancelIn(Request):
    reason: Annotated[str, msgspec.Meta(max_length=500)] | None = None


class TaskError(msgspec.Struct):
    code: str
    message: str
    retryable: bool


class TaskOwner(msgspec.Struct):
    kind: str
    id: str
    step: str | None


class RetryOut(msgspec.Struct):
    max_attempts: int
    initial_backoff_ms: int
    backoff_multiplier: float
    max_backoff_ms: int


UNSERVED_MESSAGES = {
    "no_handler": "no connected worker has a handler for this queue and type",
    "incompatible_version": "connected workers handle this type, but none this handler_version",
    "queue_out_of_scope": "no usable worker API key of this environment may serve this queue",
}


class TaskUnserved(msgspec.Struct):
    reason: str
    message: str

    @classmethod
    def of(cls, reason: str) -> TaskUnserved:
        return cls(reason, UNSERVED_MESSAGES.get(reason, reason))


class Progress(msgspec.Struct):
    """What an attempt's handler last reported with ``ctx.progress`` and when it was recorded."""

    details: dict[str, Any]
    reported_at: str | None

    @classmethod
    def of(cls, attempt: pulse_model.Attempt) -> Progress | None:
        if attempt.progress is None:
            return None
        return cls(attempt.progress, to_rfc3339(attempt.progress_at))


class TaskProgress(msgspec.Struct):
    """What the handler of a task's latest attempt last reported, and which attempt that is."""

    attempt: int
    details: dict[str, Any]
    reported_at: str | None

    @classmethod
    def of(cls, attempt: pulse_model.Attempt) -> TaskProgress | None:
        if attempt.progress is None:
            return None
        return cls(attempt.number, attempt.progress, to_rfc3339(attempt.progress_at))


class Task(msgspec.Struct):
    id: str
    queue: str
    type: str
    state: str
    params: Any
    priority: int
    run_at: str | None
    attempts: int
    max_attempts: int
    result: Any
    error: dict[str, Any] | None
    cancel_requested: bool
    idempotency_key: str | None
    concurrency_key: str | None
    fairness_key: str | None
    side_effect: str
    labels: dict[str, str]
    owner: TaskOwner | None
    created_at: str | None
    updated_at: str | None
    finished_at: str | None
    handler_version: str | None
    timeout_ms: int
    retry: RetryOut
    cancel_reason: str | None
    # GET /v1/tasks/{id} of a pending task that no connected worker could take: why.
    unserved: TaskUnserved | None = None
    # GET /v1/tasks/{id}: what the handler of its latest attempt last reported.
    progress: TaskProgress | None = None

    @classmethod
    def of(cls, task: pulse_model.Task) -> Task:
        owner = (
            TaskOwner(task.owner_kind, task.owner_id, task.owner_step)
            if task.owner_kind and task.owner_id
            else None
        )
        return cls(
            id=task.id,
            queue=task.queue,
            type=task.type,
            state=task.state,
            params=task.params,
            priority=task.priority,
            run_at=to_rfc3339(task.run_at),
            attempts=task.attempts,
            max_attempts=task.max_attempts,
            result=task.result,
            error=task.error,
            cancel_requested=task.cancel_requested,
            idempotency_key=task.idempotency_key,
            concurrency_key=task.concurrency_key,
            fairness_key=task.fairness_key,
            side_effect=task.side_effect,
            labels=task.labels,
            owner=owner,
            created_at=to_rfc3339(task.created_at),
            updated_at=to_rfc3339(task.updated_at),
            finished_at=to_rfc3339(task.finished_at),
            handler_version=task.handler_version,
            timeout_ms=task.timeout_ms,
            retry=RetryOut(
                task.max_attempts,
                task.initial_backoff_ms,
                task.backoff_multiplier,
                task.max_backoff_ms,
            ),
            cancel_reason=task.cancel_reason,
        )


class TaskList(msgspec.Struct):
    items: list[Task]
    next_cursor: str | None


class TaskBatchOut(msgspec.Struct):
    tasks: list[Task]


class Attempt(msgspec.Struct):
    number: int
    state: str
    cause: str | None
    worker_id: str | None
    session_id: str | None
    node: str | None
    leased_at: str | None
    started_at: str | None
    ended_at: str | None
    lease_expires_at: str | None
    error: dict[str, Any] | None
    progress: Progress | None

    @classmethod
    def of(cls, attempt: pulse_model.Attempt) -> Attempt:
        return cls(
            number=attempt.number,
            state=attempt.state,
            cause=attempt.cause,
            worker_id=attempt.worker_id,
            session_id=attempt.session_id,
            node=attempt.node,
            leased_at=to_rfc3339(attempt.leased_at),
            started_at=to_rfc3339(attempt.started_at),
            ended_at=to_rfc3339(attempt.ended_at),
            lease_expires_at=to_rfc3339(attempt.lease_expires_at),
            error=attempt.error,
            progress=Progress.of(attempt),
        )


class AttemptList(msgspec.Struct):
    items: list[Attempt]
    next_cursor: str | None = None


class QueueUpdate(Request):
    """Absent fields keep their value; ``null`` removes a limit."""

    concurrency_limit: Annotated[int, msgspec.Meta(ge=1, le=1000000)] | UnsetType | None = UNSET
    key_concurrency: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] | UnsetType = UNSET
    max_pending: Annotated[int, msgspec.Meta(ge=1)] | UnsetType | None = UNSET
    paused: bool | UnsetType = UNSET


class Queue(msgspec.Struct):
    name: str
    paused: bool
    concurrency_limit: int | None
    key_concurrency: int
    max_pending: int | None
    counts: dict[str, int]
    oldest_pending_age_ms: int | None
    workers: int
    unserved: list[UnservedGroup]

    @classmethod
    def of(
        cls,
        view: QueueView,
        now: datetime,
        workers: int = 0,
        unserved: Sequence[Unserved] = (),
    ) -> Queue:
        queue = view.queue
        oldest = view.oldest_ready_at
        return cls(
            name=queue.name,
            paused=queue.paused,
            concurrency_limit=queue.concurrency_limit,
            key_concurrency=queue.key_concurrency,
            max_pending=queue.max_pending,
            counts={
                state: view.counts.get(state, 0)
                for state in (
                    "scheduled",
                    "pending",
                    "leased",
                    "running",
                    "succeeded",
                    "failed",
                    "cancelled",
                    "needs_review",
                )
            },
            oldest_pending_age_ms=None
            if oldest is None
            else max(0, int((now - oldest).total_seconds() * 1000)),
            workers=workers,
            unserved=[UnservedGroup.of(u, now) for u in unserved if u.queue == queue.name],
        )


class QueueList(msgspec.Struct):
    items: list[Queue]
    next_cursor: str | None


class ErrorIn(Request):
    code: Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
    message: Annotated[str, msgspec.Meta(max_length=2000)] = ""
    retryable: bool = False


class ResolveIn(Request):
    outcome: Literal["succeeded", "failed"]
    result: Any = None
    error: ErrorIn | None = None
