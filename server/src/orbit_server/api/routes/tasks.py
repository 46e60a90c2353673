"""Tasks (API.md "Tasks (Pulse)"): submit, batch, get (long-poll), list, attempts, cancel."""

from __future__ import annotations

import re
from typing import Annotated

import msgspec
from litestar import Response, get, post
from litestar.params import FromPath, FromQuery, HeaderParameter, JSONBody, QueryParameter

from orbit_server.api.auth import actor_of, roles
from orbit_server.api.deps import NodeDep, PrincipalDep
from orbit_server.api.openapi import BODY, KEYED, error_responses
from orbit_server.api.pagination import ID_POSITION, decode_cursor, encode_cursor, page_limit
from orbit_server.api.quota import take_submit_quota
from orbit_server.api.wire_tasks import (
    Attempt,
    AttemptList,
    CancelIn,
    ResolveIn,
    Task,
    TaskBatch,
    TaskBatchOut,
    TaskList,
    TaskProgress,
    TaskSubmit,
    TaskUnserved,
)
from orbit_server.config import Settings
from orbit_server.errors import (
    IdempotencyConflict,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    QueueFull,
    RateLimited,
    StateConflict,
)
from orbit_server.governance.keys import Role
from orbit_server.pulse.model import TaskSpec
from orbit_server.pulse.retry import RetryPolicy
from orbit_server.pulse.states import SideEffect, TaskState

READERS = (Role.SUBMITTER, Role.OPERATOR, Role.ADMIN)
WRITERS = (Role.SUBMITTER, Role.OPERATOR)
MAX_WAIT_MS = 60_000


def to_spec(body: TaskSubmit, settings: Settings, traceparent: str | None) -> TaskSpec:
    """Check what the schema cannot, and build the domain's request."""
    if body.run_at is not None and body.delay_ms:
        raise InvalidRequest("give run_at or delay_ms, not both")
    if body.timeout_ms is not None and body.timeout_ms > settings.max_task_timeout_ms:
        raise InvalidRequest(f"timeout_ms must be at most {settings.max_task_timeout_ms}")
    size = len(msgspec.json.encode(body.params))
    if size > settings.max_params_bytes:
        raise PayloadTooLarge(
            f"params are {size} bytes as JSON; the limit is {settings.max_params_bytes}"
        )
    retry_in = body.retry
    try:
        retry = (
            RetryPolicy() if retry_in is None else RetryPolicy(**msgspec.structs.asdict(retry_in))
        )
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None
    return TaskSpec(
        queue=body.queue,
        type=body.type,
        params=body.params,
        idempotency_key=body.idempotency_key,
        priority=body.priority,
        delay_ms=body.delay_ms,
        run_at=body.run_at,
        retry=retry,
        timeout_ms=body.timeout_ms,
        concurrency_key=body.concurrency_key,
        fairness_key=body.fairness_key,
        side_effect=SideEffect(body.side_effect),
        handler_version=body.handler_version,
        labels=dict(body.labels),
        traceparent=traceparent,
    )


_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def accept_traceparent(value: str | None) -> str | None:
    """A W3C trace-context ``traceparent`` as it is forwarded, or None when it is not one.

    Version ``ff`` and all-zero trace or parent ids are invalid; version ``00`` is exactly 55
    characters. A later version may add fields after a dash: its first four fields are kept and
    forwarded as version 00, as the recommendation asks of parsers that know only 00.
    """
    if not value:
        return None
    match = _TRACEPARENT.match(value)
    if match is None:
        return None
    version, trace_id, parent_id, flags = match.groups()
    if version == "ff" or trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    if version == "00":
        return value if len(value) == 55 else None
    if len(value) > 55 and value[55] != "-":
        return None
    return f"00-{trace_id}-{parent_id}-{flags}"


@post(
    "/v1/tasks",
    summary="Submit a task",
    tags=["tasks"],
    status_code=201,
    opt=roles(*WRITERS),
    responses=error_responses(*KEYED, *BODY, IdempotencyConflict, QueueFull, RateLimited),
)
async def submit_task(
    data: JSONBody[TaskSubmit],
    principal: PrincipalDep,
    node: NodeDep,
    traceparent: Annotated[str | None, HeaderParameter(name="traceparent")] = None,
) -> Response[Task]:
    spec = to_spec(data, node.settings, accept_traceparent(traceparent))
    take_submit_quota(node, principal, 1, advice="; split the batch")
    submitted = await node.tasks.submit(principal.scope, spec)
    return Response(Task.of(submitted.task), status_code=201 if submitted.created else 200)


@post(
    "/v1/tasks:batch",
    summary="Submit up to 1,000 tasks at once",
    tags=["tasks"],
    opt=roles(*WRITERS),
    responses=error_responses(*KEYED, *BODY, IdempotencyConflict, QueueFull, RateLimited),
)
async def submit_batch(
    data: JSONBody[TaskBatch],
    principal: PrincipalDep,
    node: NodeDep,
    traceparent: Annotated[str | None, HeaderParameter(name="traceparent")] = None,
) -> Response[TaskBatchOut]:
    specs = []
    for index, body in enumerate(data.tasks):
        try:
            specs.append(to_spec(body, node.settings, accept_traceparent(traceparent)))
        except (InvalidRequest, PayloadTooLarge) as exc:
            raise type(exc)(f"tasks[{index}]: {exc.message}") from None
    take_submit_quota(node, principal, len(specs), advice="; split the batch")
    submitted = await node.tasks.submit_many(principal.scope, specs)
    created = any(item.created for item in submitted)
    return Response(
        TaskBatchOut(tasks=[Task.of(item.task) for item in submitted]),
        status_code=201 if created else 200,
    )


@get(
    "/v1/tasks/{task_id:str}",
    summary="One task; wait_ms long-polls until it settles",
    tags=["tasks"],
    opt=roles(*READERS),
    responses=error_responses(*KEYED, InvalidRequest, NotFound),
)
async def get_task(
    task_id: FromPath[str],
    principal: PrincipalDep,
    node: NodeDep,
    wait_ms: Annotated[int | None, QueryParameter(ge=0, le=MAX_WAIT_MS)] = None,
) -> Task:
    if wait_ms:
        task = await node.tasks.wait(principal.scope, task_id, wait_ms)
    else:
        task = await node.tasks.get(principal.scope, task_id)
    view = Task.of(task)
    latest = await node.tasks.latest_attempt(task)
    view.progress = None if latest is None else TaskProgress.of(latest)
    if task.state == TaskState.PENDING:
        why = await node.worker_views.task_unserved(
            principal.scope, task.queue, task.type, task.handler_version
        )
        if why is not None:
            view.unserved = TaskUnserved.of(why)
    return view


@get(
    "/v1/tasks",
    summary="List tasks, newest first",
    tags=["tasks"],
    opt=roles(*READERS),
    responses=error_responses(*KEYED, InvalidRequest),
)
async def list_tasks(
    principal: PrincipalDep,
    node: NodeDep,
    queue: FromQuery[str | None] = None,
    state_filter: Annotated[str | None, QueryParameter(name="state")] = None,
    type_filter: Annotated[str | None, QueryParameter(name="type")] = None,
    label: FromQuery[str | None] = None,
    limit: Annotated[int | None, QueryParameter(ge=1, le=500)] = None,
    cursor: FromQuery[str | None] = None,
) -> TaskList:
    if state_filter is not None and state_filter not in {s.value for s in TaskState}:
        raise InvalidRequest(f"unknown state {state_filter!r}")
    label_filter = None
    if label is not None:
        name, sep, value = label.partition(":")
        if not sep or not name:
            raise InvalidRequest("label filters read key:value")
        label_filter = (name, value)
    size = page_limit(limit)
    tasks, last = await node.tasks.list_tasks(
        principal.scope,
        limit=size,
        before=decode_cursor(cursor, ID_POSITION),
        queue=queue,
        state=state_filter,
        type_=type_filter,
        label=label_filter,
    )
    return TaskList(
        items=[Task.of(t) for t in tasks], next_cursor=encode_cursor(last) if last else None
    )


@get(
    "/v1/tasks/{task_id:str}/attempts",
    summary="A task's attempts",
    tags=["tasks"],
    opt=roles(*READERS),
    responses=error_responses(*KEYED, NotFound),
)
async def task_attempts(
    task_id: FromPath[str], principal: PrincipalDep, node: NodeDep
) -> AttemptList:
    attempts = await node.tasks.attempts(principal.scope, task_id)
    return AttemptList(items=[Attempt.of(a) for a in attempts])


@post(
    "/v1/tasks/{task_id:str}/cancel",
    summary="Cancel a task",
    tags=["tasks"],
    status_code=200,
    opt=roles(*WRITERS),
    responses=error_responses(*KEYED, *BODY, NotFound, StateConflict),
)
async def cancel_task(
    task_id: FromPath[str],
    principal: PrincipalDep,
    node: NodeDep,
    data: JSONBody[CancelIn | None] = None,
) -> Task:
    reason = data.reason if data is not None else None
    task = await node.tasks.cancel(
        principal.scope, task_id, reason=reason, actor=actor_of(principal)
    )
    return Task.of(task)


@post(
    "/v1/tasks/{task_id:str}/retry",
    summary="Operator: a new attempt",
    tags=["tasks"],
    status_code=200,
    opt=roles(Role.OPERATOR),
    responses=error_responses(*KEYED, NotFound, StateConflict),
)
async def retry_task(task_id: FromPath[str], principal: PrincipalDep, node: NodeDep) -> Task:
    return Task.of(await node.tasks.retry(principal.scope, task_id, actor=actor_of(principal)))


@post(
    "/v1/tasks/{task_id:str}/resolve",
    summary="Operator: decide a needs_review task",
    tags=["tasks"],
    status_code=200,
    opt=roles(Role.OPERATOR),
    responses=error_responses(*KEYED, *BODY, NotFound, StateConflict),
)
async def resolve_task(
    task_id: FromPath[str], data: JSONBody[ResolveIn], principal: PrincipalDep, node: NodeDep
) -> Task:
    succeeded = data.outcome == "succeeded"
    if succeeded and data.error is not None:
        raise InvalidRequest("a succeeded outcome takes a result, not an error")
    if not succeeded and data.error is None:
        raise InvalidRequest("a failed outcome needs an error: {code, message}")
    if not succeeded and data.result is not None:
        raise InvalidRequest("a failed outcome takes an error, not a result")
    error = None if data.error is None else msgspec.structs.asdict(data.error)
    task = await node.tasks.resolve(
        principal.scope, task_id, succeeded=succeeded, result=data.result, error=error,
        actor=actor_of(principal),
    )  # fmt: skip
    return Task.of(task)
