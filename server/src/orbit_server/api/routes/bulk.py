"""Bulk operations (operators): one action over every task a filter matches, frozen at the
start and applied in the background; progress, per-task outcomes, cancel."""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec
from litestar import Response, get, post
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from orbit_server.api.auth import actor_of, roles
from orbit_server.api.deps import NodeDep, PrincipalDep
from orbit_server.api.openapi import BODY, KEYED, error_responses
from orbit_server.api.pagination import (
    ID_POSITION,
    decode_cursor,
    encode_cursor,
    next_cursor,
    page_limit,
)
from orbit_server.api.wire_bulk import (
    BulkDryRun,
    BulkFilterIn,
    BulkItem,
    BulkItemList,
    BulkOperation,
    BulkOperationList,
    TaskBulkIn,
    WorkflowBulkDryRun,
    WorkflowBulkIn,
)
from orbit_server.api.wire_tasks import Task
from orbit_server.errors import InvalidRequest, NotFound, StateConflict
from orbit_server.governance.keys import Role
from orbit_server.pulse.bulk_tasks import TaskFilter
from orbit_server.pulse.model import TaskSelection
from orbit_server.weave.bulk import WorkflowFilter

SEQ_POSITION = re.compile(r"[0-9]{1,9}")


def task_filter(given: BulkFilterIn) -> TaskFilter:
    states = given.state if isinstance(given.state, list) else None
    if isinstance(given.state, str):
        states = [given.state]
    label = None
    if given.label is not None:
        name, _, value = given.label.partition(":")
        label = (name, value)
    selection = TaskSelection(
        queue=given.queue,
        states=None if states is None else tuple(sorted(set(states))),
        type=given.type,
        ids=None if given.ids is None else tuple(given.ids),
        created_from=given.created_after,
        created_to=given.created_before,
        finished_from=given.finished_after,
        finished_to=given.finished_before,
    )
    if selection == TaskSelection() and label is None and given.error_code is None:
        raise InvalidRequest(
            "give at least one filter field; an empty filter would match every task"
        )
    return TaskFilter(selection, label, given.error_code)


def action_params(data: TaskBulkIn) -> dict[str, Any]:
    p = data.params
    if data.action == "cancel":
        return {"reason": p.reason}
    if data.action == "retry":
        return {}
    if data.action == "resolve":
        if p.outcome is None:
            raise InvalidRequest("resolve needs params.outcome: succeeded or failed")
        if p.outcome == "failed":
            if p.error is None:
                raise InvalidRequest("resolve with outcome failed needs params.error")
            return {"outcome": "failed", "error": msgspec.to_builtins(p.error)}
        return {"outcome": "succeeded", "result": p.result}
    if data.action == "set_priority":
        if p.priority is None:
            raise InvalidRequest("set_priority needs params.priority")
        return {"priority": p.priority}
    if p.run_at is None:
        raise InvalidRequest("move_run_at needs params.run_at")
    return {"run_at": p.run_at.isoformat()}


@post(
    "/v1/tasks:bulk",
    summary="Apply one action to every task a filter matches",
    description=(
        "`dry_run: true` answers how many tasks match and a sample, changing nothing. "
        "Otherwise the matching ids are frozen at once and the action is applied in the "
        "background in batches (`202` with the operation); tasks that match later are "
        "never touched."
    ),
    tags=["bulk"],
    opt=roles(Role.OPERATOR),
    status_code=202,
    responses=error_responses(*KEYED, *BODY),
)
async def bulk_tasks(
    data: JSONBody[TaskBulkIn], principal: PrincipalDep, node: NodeDep
) -> Response[BulkOperation | BulkDryRun]:
    what = task_filter(data.filter)
    params = action_params(data)
    if data.dry_run:
        plan = await node.bulk.dry_run(principal.scope, what)
        sample = [await node.tasks.get(principal.scope, task_id) for task_id in plan.sample]
        body = BulkDryRun(True, data.action, plan.matched, [Task.of(t) for t in sample])
        return Response(body, status_code=200)
    op = await node.bulk.start(
        principal.scope, action=data.action, what=what,
        filter_doc=msgspec.to_builtins(data.filter), params=params, actor=actor_of(principal),
    )  # fmt: skip
    return Response(BulkOperation.of(op), status_code=202)


@post(
    "/v1/workflows:bulk",
    summary="Apply one control action to every workflow a filter matches",
    description=(
        "Actions: `cancel`, `pause`, `resume` (`params.reason`), `retry_step` "
        "(`params.step`: the key of the failed step). Same frozen selection, dry run and "
        "progress as `POST /v1/tasks:bulk`."
    ),
    tags=["bulk"],
    opt=roles(Role.OPERATOR),
    status_code=202,
    responses=error_responses(*KEYED, *BODY),
)
async def bulk_workflows(
    data: JSONBody[WorkflowBulkIn], principal: PrincipalDep, node: NodeDep
) -> Response[BulkOperation | WorkflowBulkDryRun]:
    given = data.filter
    states = [given.state] if isinstance(given.state, str) else given.state
    what = WorkflowFilter(
        definition=given.definition,
        states=None if states is None else tuple(sorted(set(states))),
        ids=None if given.ids is None else tuple(given.ids),
        created_from=given.created_after,
        created_to=given.created_before,
    )
    if what == WorkflowFilter():
        raise InvalidRequest(
            "give at least one filter field; an empty filter would match every workflow"
        )
    if data.action == "retry_step":
        if data.params.step is None:
            raise InvalidRequest("retry_step needs params.step: the key of the failed step")
        params: dict[str, Any] = {"step": data.params.step}
    else:
        params = {"reason": data.params.reason}
    if data.dry_run:
        plan = await node.bulk.dry_run(principal.scope, what)
        return Response(
            WorkflowBulkDryRun(True, data.action, plan.matched, plan.sample), status_code=200
        )
    op = await node.bulk.start(
        principal.scope, action=data.action, what=what,
        filter_doc=msgspec.to_builtins(data.filter), params=params, actor=actor_of(principal),
    )  # fmt: skip
    return Response(BulkOperation.of(op), status_code=202)


@get(
    "/v1/bulk-operations",
    summary="Bulk operations, newest first",
    tags=["bulk"],
    opt=roles(Role.OPERATOR, Role.ADMIN),
    responses=error_responses(*KEYED, InvalidRequest),
)
async def list_bulk_operations(
    principal: PrincipalDep,
    node: NodeDep,
    limit: Annotated[int | None, QueryParameter(ge=1, le=500)] = None,
    cursor: FromQuery[str | None] = None,
) -> BulkOperationList:
    size = page_limit(limit)
    ops = await node.bulk.list_operations(
        principal.scope, before=decode_cursor(cursor, ID_POSITION), limit=size
    )
    return BulkOperationList(
        items=[BulkOperation.of(o) for o in ops], next_cursor=next_cursor([o.id for o in ops], size)
    )


@get(
    "/v1/bulk-operations/{op_id:str}",
    summary="One bulk operation and its progress",
    tags=["bulk"],
    opt=roles(Role.OPERATOR, Role.ADMIN),
    responses=error_responses(*KEYED, NotFound),
)
async def get_bulk_operation(
    op_id: FromPath[str], principal: PrincipalDep, node: NodeDep
) -> BulkOperation:
    return BulkOperation.of(await node.bulk.get(principal.scope, op_id))


@get(
    "/v1/bulk-operations/{op_id:str}/items",
    summary="What the operation did to each task, in selection order",
    tags=["bulk"],
    opt=roles(Role.OPERATOR, Role.ADMIN),
    responses=error_responses(*KEYED, InvalidRequest, NotFound),
)
async def list_bulk_items(
    op_id: FromPath[str],
    principal: PrincipalDep,
    node: NodeDep,
    limit: Annotated[int | None, QueryParameter(ge=1, le=500)] = None,
    cursor: FromQuery[str | None] = None,
) -> BulkItemList:
    size = page_limit(limit)
    after = decode_cursor(cursor, SEQ_POSITION)
    items = await node.bulk.items(
        principal.scope, op_id, after=-1 if after is None else int(after), limit=size
    )
    last = str(items[-1].seq) if len(items) == size else None
    return BulkItemList(
        items=[BulkItem.of(i) for i in items],
        next_cursor=encode_cursor(last) if last is not None else None,
    )


@post(
    "/v1/bulk-operations/{op_id:str}/cancel",
    summary="Stop a running bulk operation",
    tags=["bulk"],
    opt=roles(Role.OPERATOR),
    status_code=200,
    responses=error_responses(*KEYED, NotFound, StateConflict),
)
async def cancel_bulk_operation(
    op_id: FromPath[str], principal: PrincipalDep, node: NodeDep
) -> BulkOperation:
    return BulkOperation.of(
        await node.bulk.cancel(principal.scope, op_id, actor=actor_of(principal))
    )
