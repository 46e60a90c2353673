"""Workflows (API.md "Workflows (Weave)"): publish and read definitions; start, read, list,
signal, pause, resume and cancel instances; an operator's step recovery."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from litestar import Response, get, post
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from orbit_server.api.auth import actor_of, roles
from orbit_server.api.deps import NodeDep, PrincipalDep
from orbit_server.api.openapi import BODY, KEYED, error_responses
from orbit_server.api.pagination import decode_cursor, next_cursor, page_limit
from orbit_server.api.wire_workflows import (
    ControlIn,
    DefinitionList,
    DefinitionSummary,
    ResolveIn,
    RetryIn,
    Signal,
    SignalIn,
    SkipIn,
    Step,
    StepList,
    Workflow,
    WorkflowDefinition,
    WorkflowList,
    WorkflowStart,
)
from orbit_server.errors import (
    DefinitionInvalid,
    IdempotencyConflict,
    InvalidRequest,
    NotFound,
    QueueFull,
    StateConflict,
    VersionExists,
)
from orbit_server.governance.keys import Role
from orbit_server.weave import model as weave_model
from orbit_server.weave.engine import WorkflowState

READERS = (Role.SUBMITTER, Role.OPERATOR, Role.ADMIN)
WRITERS = (Role.SUBMITTER, Role.OPERATOR)
OPERATORS = (Role.OPERATOR, Role.ADMIN)
# Cancelling is "cancel own work" (API.md): a submitter may cancel the instances of its scope,
# as it may cancel their tasks.
CANCELLERS = (Role.SUBMITTER, Role.OPERATOR, Role.ADMIN)
MAX_WAIT_MS = 60_000
STATES = frozenset(str(s) for s in WorkflowState)
Steer = Callable[..., Awaitable[weave_model.Workflow]]


@post(
    "/v1/workflow-definitions",
    summary="Publish a workflow definition version (the SDK builder's JSON; "
    "contracts/workflow-definition.schema.json)",
    tags=["workflows"],
    status_code=201,
    opt=roles(*OPERATORS),
    responses=error_responses(*KEYED, *BODY, VersionExists, DefinitionInvalid),
)
async def publish_definition(
    data: JSONBody[dict[str, Any]], principal: PrincipalDep, node: NodeDep
) -> Response[WorkflowDefinition]:
    record, created = await node.workflows.publish(
        principal.scope, unwrapped(data), actor=actor_of(principal)
    )
    return Response(WorkflowDefinition.full(record), status_code=201 if created else 200)


def unwrapped(data: dict[str, Any]) -> dict[str, Any]:
    """The definition body: as the builder emits it, or wrapped the way a definition is read
    back (``{"name", "version", "definition": {...}}``)."""
    inner = data.get("definition")
    if not isinstance(inner, dict) or "steps" in data:
        return data
    extra = set(data) - {"name", "version", "definition"}
    if extra:
        raise DefinitionInvalid(
            "the workflow definition is not valid",
            details={"reasons": [f"unknown field {sorted(extra)[0]!r} beside 'definition'"]},
        )
    body = dict(inner)
    for field in ("name", "version"):
        if field in data:
            if field in body and body[field] != data[field]:
                raise DefinitionInvalid(
                    "the workflow definition is not valid",
                    details={"reasons": [f"{field} differs inside and outside 'definition'"]},
                )
            body[field] = data[field]
    return body


@get(
    "/v1/workflow-definitions",
    summary="Definition versions by name",
    tags=["workflows"],
    opt=roles(*READERS),
    responses=error_responses(*KEYED, InvalidRequest),
)
async def list_definitions(
    principal: PrincipalDep,
    node: NodeDep,
    name: FromQuery[str | None] = None,
    limit: Annotated[int | None, QueryParameter(ge=1, le=500)] = None,
    cursor: FromQuery[str | None] = None,
) -> DefinitionList:
    size = page_limit(limit)
    position = decode_cursor(cursor)
    after = None
    if position is not None:
        before_tab, tab, after_tab = position.partition("\t")
        if not tab:
            raise InvalidRequest("the cursor is not valid; use next_cursor from a list answer")
        after = (before_tab, after_tab)
    found = await node.workflows.list_definitions(
        principal.scope, name=name, after=after, limit=size
    )
    return DefinitionList(
        items=[DefinitionSummary.of(r) for r in found],
        next_cursor=next_cursor([f"{r.name}\t{r.version}" for r in found], size),
    )


@get(
    "/v1/workflow-definitions/{name:str}/versions/{version:str}",
    summary="One definition version",
    tags=["workflows"],
    opt=roles(*READERS),
    responses=error_responses(*KEYED, NotFound),
)
async def get_definition(
    name: FromPath[str], version: FromPath[str], principal: PrincipalDep, node: NodeDep
) -> WorkflowDefinition:
    return WorkflowDefinition.full(await node.workflows.definition(principal.scope, name, version))


@post(
    "/v1/workflows",
    summary="Start a workflow",
    tags=["workflows"],
    status_code=201,
    opt=roles(*WRITERS),
    responses=error_responses(*KEYED, *BODY, NotFound, IdempotencyConflict, QueueFull),
)
async def start_workflow(
    data: JSONBody[WorkflowStart], principal: PrincipalDep, node: NodeDep
) -> Response[Workflow]:
    seen, created = await node.workflows.start(
        principal.scope, data.definition, version=data.version, input_=data.input,
        idempotency_key=data.idempotency_key,
    )  # fmt: skip
    return Response(Workflow.inspected(seen), status_code=201 if created else 200)


@get(
    "/v1/workflows/{workflow_id:str}",
    summary="One workflow with its steps, waits and pending signals; wait_ms long-polls "
    "until it finishes",
    tags=["workflows"],
    opt=roles(*READERS),
    responses=error_responses(*KEYED, InvalidRequest, NotFound),
)
async def get_workflow(
    workflow_id: FromPath[str],
    principal: PrincipalDep,
    node: NodeDep,
    wait_ms: Annotated[int | None, QueryParameter(ge=0, le=MAX_WAIT_MS)] = None,
) -> Workflow:
    seen = await node.workflows.inspect(principal.scope, workflow_id, wait_ms=wait_ms or 0)
    return Workflow.inspected(seen)


@get(
    "/v1/workflows",
    summary="List workflows, newest first",
    tags=["workflows"],
    opt=roles(*READERS),
    responses=error_responses(*KEYED, InvalidRequest),
)
async def list_workflows(
    principal: PrincipalDep,
    node: NodeDep,
    definition: FromQuery[str | None] = None,
    state_filter: Annotated[str | None, QueryParameter(name="state")] = None,
    limit: Annotated[int | None, QueryParameter(ge=1, le=500)] = None,
    cursor: FromQuery[str | None] = None,
) -> WorkflowList:
    if state_filter is not None and state_filter not in STATES:
        raise InvalidRequest(f"state must be one of {', '.join(sorted(STATES))}")
    size = page_limit(limit)
    found = await node.workflows.list_workflows(
        principal.scope, definition=definition, state=state_filter,
        before=decode_cursor(cursor), limit=size,
    )  # fmt: skip
    return WorkflowList(
        items=[Workflow.of(w) for w in found], next_cursor=next_cursor([w.id for w in found], size)
    )


@get(
    "/v1/workflows/{workflow_id:str}/steps",
    summary="Every step execution (map items and poll rounds too), in the order they began",
    tags=["workflows"],
    opt=roles(*READERS),
    responses=error_responses(*KEYED, InvalidRequest, NotFound),
)
async def list_steps(
    workflow_id: FromPath[str],
    principal: PrincipalDep,
    node: NodeDep,
    limit: Annotated[int | None, QueryParameter(ge=1, le=500)] = None,
    cursor: FromQuery[str | None] = None,
) -> StepList:
    size = page_limit(limit)
    position = decode_cursor(cursor)
    if position is not None and not position.isdigit():
        raise InvalidRequest("the cursor is not valid; use next_cursor from a list answer")
    rows = await node.workflows.steps(
        principal.scope, workflow_id, after=int(position or 0), limit=size
    )
    return StepList(
        items=[Step.of(r) for r in rows], next_cursor=next_cursor([str(r.seq) for r in rows], size)
    )


@post(
    "/v1/workflows/{workflow_id:str}/signals",
    summary="Send a signal (kept until a step waits for it)",
    tags=["workflows"],
    status_code=202,
    opt=roles(*WRITERS),
    responses=error_responses(
        *KEYED, *BODY, NotFound, IdempotencyConflict, StateConflict, QueueFull
    ),
)
async def send_signal(
    workflow_id: FromPath[str], data: JSONBody[SignalIn], principal: PrincipalDep, node: NodeDep
) -> Signal:
    record = await node.workflows.signal(
        principal.scope, workflow_id, data.name, data.payload, data.idempotency_key
    )
    return Signal.of(record)


async def _control(node: NodeDep, principal: PrincipalDep, workflow_id: str) -> Workflow:
    return Workflow.inspected(await node.workflows.inspect(principal.scope, workflow_id))


async def _steered(
    steer: Steer,
    node: NodeDep,
    principal: PrincipalDep,
    workflow_id: str,
    data: ControlIn | None,
) -> Workflow:
    """Pause, resume or cancel, then the instance as it stands."""
    await steer(
        principal.scope, workflow_id, reason=data.reason if data else None,
        actor=actor_of(principal),
    )  # fmt: skip
    return await _control(node, principal, workflow_id)


@post(
    "/v1/workflows/{workflow_id:str}/pause",
    summary="Pause a workflow",
    tags=["workflows"],
    status_code=200,
    opt=roles(*OPERATORS),
    responses=error_responses(*KEYED, *BODY, NotFound, StateConflict),
)
async def pause_workflow(
    workflow_id: FromPath[str], principal: PrincipalDep, node: NodeDep,
    data: JSONBody[ControlIn | None] = None,
) -> Workflow:  # fmt: skip
    return await _steered(node.workflow_control.pause, node, principal, workflow_id, data)


@post(
    "/v1/workflows/{workflow_id:str}/resume",
    summary="Resume a paused workflow",
    tags=["workflows"],
    status_code=200,
    opt=roles(*OPERATORS),
    responses=error_responses(*KEYED, *BODY, NotFound, StateConflict, QueueFull),
)
async def resume_workflow(
    workflow_id: FromPath[str], principal: PrincipalDep, node: NodeDep,
    data: JSONBody[ControlIn | None] = None,
) -> Workflow:  # fmt: skip
    return await _steered(node.workflow_control.resume, node, principal, workflow_id, data)


@post(
    "/v1/workflows/{workflow_id:str}/cancel",
    summary="Cancel a workflow and its step tasks",
    tags=["workflows"],
    status_code=200,
    opt=roles(*CANCELLERS),
    responses=error_responses(*KEYED, *BODY, NotFound, StateConflict),
)
async def cancel_workflow(
    workflow_id: FromPath[str], principal: PrincipalDep, node: NodeDep,
    data: JSONBody[ControlIn | None] = None,
) -> Workflow:  # fmt: skip
    return await _steered(node.workflow_control.cancel, node, principal, workflow_id, data)


@post(
    "/v1/workflows/{workflow_id:str}/steps/{key:str}/retry",
    summary="Run the failed step that ended the workflow again",
    tags=["workflows"],
    status_code=200,
    opt=roles(*OPERATORS),
    responses=error_responses(*KEYED, *BODY, NotFound, StateConflict, QueueFull),
)
async def retry_step(
    workflow_id: FromPath[str], key: FromPath[str], principal: PrincipalDep, node: NodeDep,
    data: JSONBody[RetryIn | None] = None,
) -> Workflow:  # fmt: skip
    await node.workflow_control.retry_step(
        principal.scope, workflow_id, key, actor=actor_of(principal)
    )
    return await _control(node, principal, workflow_id)


@post(
    "/v1/workflows/{workflow_id:str}/steps/{key:str}/skip",
    summary="End a step as skipped with the given output and go on",
    tags=["workflows"],
    status_code=200,
    opt=roles(*OPERATORS),
    responses=error_responses(*KEYED, *BODY, NotFound, StateConflict, QueueFull),
)
async def skip_step(
    workflow_id: FromPath[str], key: FromPath[str], principal: PrincipalDep, node: NodeDep,
    data: JSONBody[SkipIn | None] = None,
) -> Workflow:  # fmt: skip
    await node.workflow_control.skip_step(
        principal.scope, workflow_id, key, output=data.output if data else None,
        actor=actor_of(principal),
    )  # fmt: skip
    return await _control(node, principal, workflow_id)


@post(
    "/v1/workflows/{workflow_id:str}/steps/{key:str}/resolve",
    summary="Decide a needs_review step's outcome",
    tags=["workflows"],
    status_code=200,
    opt=roles(*OPERATORS),
    responses=error_responses(*KEYED, *BODY, NotFound, StateConflict),
)
async def resolve_step(
    workflow_id: FromPath[str], key: FromPath[str], data: JSONBody[ResolveIn],
    principal: PrincipalDep, node: NodeDep,
) -> Workflow:  # fmt: skip
    succeeded = data.outcome == "succeeded"
    if succeeded and data.error is not None:
        raise InvalidRequest("a succeeded outcome takes output, not error")
    if not succeeded and data.error is None:
        raise InvalidRequest("a failed outcome needs error {code, message}")
    error = None if data.error is None else {"code": data.error.code,
                                             "message": data.error.message}  # fmt: skip
    await node.workflow_control.resolve_step(
        principal.scope, workflow_id, key, succeeded=succeeded, output=data.output, error=error,
        actor=actor_of(principal),
    )  # fmt: skip
    return await _control(node, principal, workflow_id)
