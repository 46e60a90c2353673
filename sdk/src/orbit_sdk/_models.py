"""The task and queue wire contract: typed objects, and for each call what it sends and reads.

The objects decode leniently: fields the server adds later are ignored. Every call is first
described as an :class:`Operation` (method, path, body, query, headers and a reader for the
answer) without any I/O, so ``Client`` and ``AsyncClient`` build and read requests the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Generic, Literal, TypeAlias, TypeVar
from urllib.parse import quote

import msgspec
from msgspec import UNSET, UnsetType

__all__ = [
    "MAX_BATCH",
    "MAX_WAIT_MS",
    "SETTLED_STATES",
    "TERMINAL_STATES",
    "Attempt",
    "Operation",
    "Queue",
    "RetryPolicy",
    "Task",
    "TaskError",
    "TaskOwner",
    "TaskPage",
    "TaskRequest",
    "queue_list",
    "queue_update",
    "task_attempts",
    "task_cancel",
    "task_get",
    "task_list",
    "task_resolve",
    "task_retry",
    "task_submit",
    "task_submit_many",
]

T = TypeVar("T")

TERMINAL_STATES: Final = frozenset({"succeeded", "failed", "cancelled"})
SETTLED_STATES: Final = TERMINAL_STATES | {"needs_review"}
"""The states a long poll (``wait_ms``) returns on: terminal, or waiting for an operator."""
MAX_BATCH: Final = 1000
MAX_WAIT_MS: Final = 60_000

SideEffect: TypeAlias = Literal["idempotent", "unsafe"]
Outcome: TypeAlias = Literal["succeeded", "failed"]


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A task's retry policy; the defaults are Orbit's.

    Read from a task it holds the policy in force. Passed to ``submit`` it sends only the fields
    that differ from the defaults, which Orbit treats exactly as if they were sent.
    """

    max_attempts: int = 3
    """Attempts in all, the first one included (1 to 1000)."""
    initial_backoff_ms: int = 1000
    """The wait before the second attempt."""
    backoff_multiplier: float = 2.0
    """Each further wait grows by this factor."""
    max_backoff_ms: int = 60_000
    """The longest wait."""


class TaskError(msgspec.Struct, frozen=True, kw_only=True):
    """A failure recorded on a task or an attempt: the handler's or Orbit's own ``code``."""

    code: str
    message: str = ""
    retryable: bool = False


class TaskOwner(msgspec.Struct, frozen=True, kw_only=True):
    """What made a task: a workflow step (``kind`` ``"workflow"``, the workflow's ``id`` and the
    ``step``) or a schedule (``kind`` ``"schedule"``, the schedule's ``id``, no ``step``)."""

    kind: str
    id: str
    step: str | None = None


class TaskProgress(msgspec.Struct, frozen=True, kw_only=True):
    """What a handler last reported with ``ctx.progress``: its ``details`` (the JSON object it
    passed) and when Orbit recorded them; on a task, ``attempt`` says which attempt reported."""

    details: dict[str, Any]
    reported_at: datetime | None = None
    attempt: int | None = None


class Task(msgspec.Struct, frozen=True, kw_only=True):
    """A task as Orbit reports it. Times are timezone-aware UTC datetimes.

    Fields that can be ``null`` default to ``None``; fields Orbit adds later are ignored.
    """

    id: str
    queue: str
    type: str
    state: str
    """``scheduled``, ``pending``, ``leased``, ``running``, ``succeeded``, ``failed``,
    ``cancelled`` or ``needs_review``."""
    params: Any = None
    priority: int
    run_at: datetime
    attempts: int
    """Attempts started so far."""
    max_attempts: int
    result: Any = None
    error: TaskError | None = None
    cancel_requested: bool
    idempotency_key: str | None = None
    concurrency_key: str | None = None
    fairness_key: str | None = None
    side_effect: str
    """``idempotent`` or ``unsafe``."""
    labels: dict[str, str]
    owner: TaskOwner | None = None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    handler_version: str | None = None
    timeout_ms: int
    retry: RetryPolicy
    cancel_reason: str | None = None
    progress: TaskProgress | None = None
    """What the handler of its latest attempt last reported (``get_task`` only)."""

    @property
    def is_terminal(self) -> bool:
        """``succeeded``, ``failed`` or ``cancelled``."""
        return self.state in TERMINAL_STATES

    @property
    def is_settled(self) -> bool:
        """Terminal, or ``needs_review``: nothing happens until an operator acts."""
        return self.state in SETTLED_STATES


class Attempt(msgspec.Struct, frozen=True, kw_only=True):
    """One lease of a task, from its claim to how it ended."""

    number: int
    state: str
    """``leased``, ``running``, or how it ended: ``succeeded``, ``failed``, ``cancelled``,
    ``needs_review`` or ``released``."""
    cause: str | None = None
    worker_id: str | None = None
    session_id: str | None = None
    node: str | None = None
    leased_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    lease_expires_at: datetime | None = None
    error: TaskError | None = None
    progress: TaskProgress | None = None
    """What its handler last reported (``ctx.progress``)."""


class Queue(msgspec.Struct, frozen=True, kw_only=True):
    """A queue's settings and what it holds. ``None`` limits mean no limit."""

    name: str
    paused: bool
    concurrency_limit: int | None = None
    key_concurrency: int
    max_pending: int | None = None
    counts: dict[str, int]
    """The number of the queue's tasks in each state."""
    oldest_pending_age_ms: int | None = None
    """How long the longest-waiting claimable task has been ready."""
    workers: int


class TaskPage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of a task list. ``next_cursor`` is ``None`` on the last page; a page can be
    short, even empty, and still have one."""

    items: list[Task]
    next_cursor: str | None = None


class TaskRequest(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One submission, as ``submit_many`` takes it; fields left ``None`` take Orbit's defaults.

    ``run_at`` is a timezone-aware ``datetime`` or an RFC 3339 string with an offset.
    """

    queue: str
    type: str
    params: Any = None
    priority: int | None = None
    run_at: datetime | str | None = None
    delay_ms: int | None = None
    idempotency_key: str | None = None
    concurrency_key: str | None = None
    fairness_key: str | None = None
    side_effect: SideEffect | None = None
    handler_version: str | None = None
    retry: RetryPolicy | None = None
    timeout_ms: int | None = None
    labels: dict[str, str] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.run_at, datetime) and self.run_at.utcoffset() is None:
            raise ValueError("run_at must be timezone-aware, e.g. datetime.now(UTC)")


class _TaskBatch(msgspec.Struct, frozen=True):
    tasks: list[Task]


class _AttemptList(msgspec.Struct, frozen=True):
    items: list[Attempt]


class _QueuePage(msgspec.Struct, frozen=True):
    items: list[Queue]
    next_cursor: str | None = None


_task: Final = msgspec.json.Decoder(Task)
_task_page: Final = msgspec.json.Decoder(TaskPage)
_task_batch: Final = msgspec.json.Decoder(_TaskBatch)
_attempt_list: Final = msgspec.json.Decoder(_AttemptList)
_queue: Final = msgspec.json.Decoder(Queue)
_queue_page: Final = msgspec.json.Decoder(_QueuePage)


@dataclass(frozen=True, slots=True)
class Operation(Generic[T]):
    """One API call described without I/O: what to send, and how to read a 2xx answer.

    ``read`` gets the raw body and may raise ``msgspec.DecodeError``; ``timeout`` (seconds)
    overrides the client's for this call only.
    """

    method: str
    path: str
    read: Callable[[bytes], T]
    json: Any = None
    params: Mapping[str, str | int | None] | None = None
    headers: Mapping[str, str] | None = None
    timeout: float | None = None


def _segment(value: str) -> str:
    if not value:
        raise ValueError("ids and names in paths must not be empty")
    return quote(value, safe="")


def _trace_headers(traceparent: str | None) -> dict[str, str] | None:
    # Orbit reads the W3C trace context from the header, never from the body.
    return None if traceparent is None else {"traceparent": traceparent}


def task_submit(request: TaskRequest, traceparent: str | None) -> Operation[Task]:
    """``POST /v1/tasks``."""
    return Operation(
        "POST", "/v1/tasks", _task.decode, request, headers=_trace_headers(traceparent)
    )


def task_submit_many(
    tasks: Sequence[TaskRequest | Mapping[str, Any]], traceparent: str | None
) -> Operation[list[Task]]:
    """``POST /v1/tasks:batch``: up to ``MAX_BATCH`` tasks, answered in order."""
    if not 1 <= len(tasks) <= MAX_BATCH:
        raise ValueError(f"a batch holds 1 to {MAX_BATCH} tasks, not {len(tasks)}")
    items = [task if isinstance(task, TaskRequest) else dict(task) for task in tasks]
    return Operation(
        "POST",
        "/v1/tasks:batch",
        lambda body: _task_batch.decode(body).tasks,
        {"tasks": items},
        headers=_trace_headers(traceparent),
    )


def task_get(
    task_id: str, *, wait_ms: int | None = None, timeout: float | None = None
) -> Operation[Task]:
    """``GET /v1/tasks/{id}``, long-polling for up to ``wait_ms`` when given."""
    params = None if wait_ms is None else {"wait_ms": wait_ms}
    path = f"/v1/tasks/{_segment(task_id)}"
    return Operation("GET", path, _task.decode, params=params, timeout=timeout)


def task_list(
    *,
    queue: str | None,
    state: str | None,
    type: str | None,
    label: str | tuple[str, str] | None,
    limit: int | None,
    cursor: str | None,
) -> Operation[TaskPage]:
    """``GET /v1/tasks``: one page, newest first. ``label`` is ``"key:value"`` or a pair."""
    if isinstance(label, tuple):
        label = f"{label[0]}:{label[1]}"
    params = {
        "queue": queue,
        "state": state,
        "type": type,
        "label": label,
        "limit": limit,
        "cursor": cursor,
    }
    return Operation("GET", "/v1/tasks", _task_page.decode, params=params)


def task_attempts(task_id: str) -> Operation[list[Attempt]]:
    """``GET /v1/tasks/{id}/attempts``: all of them, oldest first."""
    path = f"/v1/tasks/{_segment(task_id)}/attempts"
    return Operation("GET", path, lambda body: _attempt_list.decode(body).items)


def task_cancel(task_id: str, reason: str | None) -> Operation[Task]:
    """``POST /v1/tasks/{id}/cancel``, with a body only when there is a reason."""
    body = None if reason is None else {"reason": reason}
    return Operation("POST", f"/v1/tasks/{_segment(task_id)}/cancel", _task.decode, body)


def task_retry(task_id: str) -> Operation[Task]:
    """``POST /v1/tasks/{id}/retry``."""
    return Operation("POST", f"/v1/tasks/{_segment(task_id)}/retry", _task.decode)


def task_resolve(
    task_id: str,
    outcome: Outcome,
    result: Any,
    error: TaskError | Mapping[str, Any] | None,
) -> Operation[Task]:
    """``POST /v1/tasks/{id}/resolve``; Orbit checks that the outcome and its fields agree."""
    body: dict[str, Any] = {"outcome": outcome}
    if result is not None:
        body["result"] = result
    if error is not None:
        body["error"] = error if isinstance(error, TaskError) else dict(error)
    return Operation("POST", f"/v1/tasks/{_segment(task_id)}/resolve", _task.decode, body)


def queue_list(cursor: str | None) -> Operation[_QueuePage]:
    """``GET /v1/queues``: one page (of the largest size), by name."""
    params = {"limit": 500, "cursor": cursor}
    return Operation("GET", "/v1/queues", _queue_page.decode, params=params)


def queue_update(
    name: str,
    *,
    paused: bool | None,
    concurrency_limit: int | UnsetType | None,
    key_concurrency: int | None,
    max_pending: int | UnsetType | None,
) -> Operation[Queue]:
    """``PUT /v1/queues/{name}``: only the settings given; ``None`` limits are cleared."""
    body: dict[str, Any] = {}
    if paused is not None:
        body["paused"] = paused
    if concurrency_limit is not UNSET:
        body["concurrency_limit"] = concurrency_limit
    if key_concurrency is not None:
        body["key_concurrency"] = key_concurrency
    if max_pending is not UNSET:
        body["max_pending"] = max_pending
    return Operation("PUT", f"/v1/queues/{_segment(name)}", _queue.decode, body)
