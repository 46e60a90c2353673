"""The operators' views: workers across nodes, bulk operations (filter → dry run → confirm →
progress) and the audit log."""

from __future__ import annotations

from typing import Any

from litestar import Request, get, post
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect, Template

from orbit_server.console.app import PREFIX, back, form, page, viewer_of
from orbit_server.console.pages.common import (
    PAGE,
    bounded,
    label_of,
    moment,
    next_url,
    require_operations,
    require_operator,
    scope_of,
    text,
)
from orbit_server.errors import InvalidRequest
from orbit_server.pulse.bulk_tasks import TASK_ACTIONS, TaskFilter
from orbit_server.pulse.model import TaskSelection
from orbit_server.pulse.states import TaskState
from orbit_server.weave.bulk import WORKFLOW_ACTIONS, WorkflowFilter
from orbit_server.weave.states import WorkflowState

ENDED_WITHIN_MS = 3_600_000
STATES = [str(s) for s in TaskState]
WORKFLOW_STATES = [str(s) for s in WorkflowState]


@get(f"{PREFIX}/workers", include_in_schema=False)
async def workers_page(
    request: Request[Any, Any, Any],
    queue: FromQuery[str | None] = None,
    cursor: FromQuery[str | None] = None,
) -> Template:
    require_operations(request)
    node = request.app.state["node"]
    views = await node.worker_views.list_workers(
        scope_of(request), queue=text(queue), ended_within_ms=ENDED_WITHIN_MS, limit=PAGE,
        before=text(cursor),
    )  # fmt: skip
    last = views[-1].session_id if len(views) == PAGE else None
    return page("workers.html", request, workers=views, queue=queue or "",
                next_url=next_url(request, last))  # fmt: skip


@get(f"{PREFIX}/workers/{{session_id:str}}", include_in_schema=False)
async def worker_page(request: Request[Any, Any, Any], session_id: FromPath[str]) -> Template:
    require_operations(request)
    node = request.app.state["node"]
    view = await node.worker_views.worker(scope_of(request), session_id)
    return page("worker.html", request, w=view)


def _filter(fields: dict[str, str]) -> tuple[TaskFilter, dict[str, Any]]:
    """The task filter of the bulk form, and the same as the API's ``filter`` document."""
    state = text(fields.get("state"))
    if state is not None and state not in STATES:
        raise InvalidRequest(f"unknown state {state!r}")
    selection = TaskSelection(
        queue=text(fields.get("queue")), states=(state,) if state else None,
        type=text(fields.get("type")), created_from=moment(fields.get("created_after")),
        created_to=moment(fields.get("created_before")),
        finished_from=moment(fields.get("finished_after")),
        finished_to=moment(fields.get("finished_before")),
    )  # fmt: skip
    label = label_of(text(fields.get("label")))
    error_code = text(fields.get("error_code"))
    if selection == TaskSelection() and label is None and error_code is None:
        raise InvalidRequest("give at least one filter field; an empty one matches every task")
    names = ("queue", "state", "type", "label", "error_code", "created_after", "created_before",
             "finished_after", "finished_before")  # fmt: skip
    return TaskFilter(selection, label, error_code), {
        n: text(fields.get(n)) for n in names if text(fields.get(n))
    }


def _params(action: str, fields: dict[str, str]) -> dict[str, Any]:
    if action == "cancel":
        return {"reason": bounded(fields.get("reason"), 500, "the reason")}
    if action == "set_priority":
        try:
            priority = int(fields.get("priority", ""))
        except ValueError:
            raise InvalidRequest("set_priority needs a whole number") from None
        if not -1_000_000 <= priority <= 1_000_000:
            raise InvalidRequest("a priority is between -1,000,000 and 1,000,000")
        return {"priority": priority}
    if action == "move_run_at":
        run_at = moment(fields.get("run_at"))
        if run_at is None:
            raise InvalidRequest("move_run_at needs a time")
        return {"run_at": run_at.isoformat()}
    if action == "resolve":
        if fields.get("outcome") == "succeeded":
            return {"outcome": "succeeded", "result": None}
        code = bounded(fields.get("code"), 100, "the error code") or "resolved_failed"
        return {"outcome": "failed", "error": {"code": code, "message": fields.get("message", "")}}
    return {}


@get(f"{PREFIX}/bulk", include_in_schema=False)
async def bulk_page(request: Request[Any, Any, Any]) -> Template:
    require_operations(request)
    node = request.app.state["node"]
    ops = await node.bulk.list_operations(scope_of(request), before=None, limit=PAGE)
    return page("bulk.html", request, ops=ops, actions=TASK_ACTIONS, states=STATES,
                fields={}, plan=None, sample=[], wf_fields={}, wf_plan=None,
                wf_actions=WORKFLOW_ACTIONS, wf_states=WORKFLOW_STATES)  # fmt: skip


@post(f"{PREFIX}/bulk", include_in_schema=False)
async def bulk_submit(request: Request[Any, Any, Any]) -> Template | Redirect:
    """First the dry run (the count and a sample, shown with a confirm button), then — with
    ``confirm`` — the operation itself."""
    require_operator(request)
    node = request.app.state["node"]
    viewer = viewer_of(request)
    fields = form(request)
    action = fields.get("action", "")
    if action not in TASK_ACTIONS:
        raise InvalidRequest(f"choose one of {', '.join(TASK_ACTIONS)}")
    what, document = _filter(fields)
    params = _params(action, fields)
    scope = viewer.principal.scope
    if fields.get("confirm") != "yes":
        plan = await node.bulk.dry_run(scope, what)
        sample = [await node.tasks.get(scope, task_id) for task_id in plan.sample]
        ops = await node.bulk.list_operations(scope, before=None, limit=PAGE)
        return page("bulk.html", request, ops=ops, actions=TASK_ACTIONS, states=STATES,
                    fields=fields, plan=plan, sample=sample, wf_fields={}, wf_plan=None,
                    wf_actions=WORKFLOW_ACTIONS, wf_states=WORKFLOW_STATES)  # fmt: skip
    op = await node.bulk.start(scope, action=action, what=what, filter_doc=document,
                               params=params, actor=viewer.actor)  # fmt: skip
    return back(request, f"{PREFIX}/bulk/{op.id}", f"Started: {op.matched} tasks selected.")


@post(f"{PREFIX}/bulk/workflows", include_in_schema=False)
async def bulk_workflows_submit(request: Request[Any, Any, Any]) -> Template | Redirect:
    """The same for workflows: dry run first, then the operation with ``confirm``."""
    require_operator(request)
    node = request.app.state["node"]
    viewer = viewer_of(request)
    fields = form(request)
    action = fields.get("action", "")
    if action not in WORKFLOW_ACTIONS:
        raise InvalidRequest(f"choose one of {', '.join(WORKFLOW_ACTIONS)}")
    state = text(fields.get("state"))
    if state is not None and state not in WORKFLOW_STATES:
        raise InvalidRequest(f"unknown state {state!r}")
    definition = bounded(fields.get("definition"), 128, "the definition")
    what = WorkflowFilter(
        definition=definition, states=(state,) if state else None,
        created_from=moment(fields.get("created_after")),
        created_to=moment(fields.get("created_before")),
    )  # fmt: skip
    if what == WorkflowFilter():
        raise InvalidRequest("give at least one filter field; an empty one matches everything")
    if action == "retry_step":
        step = bounded(fields.get("step"), 160, "the step's key")
        if step is None:
            raise InvalidRequest("retry_step needs the failed step's key")
        params: dict[str, Any] = {"step": step}
    else:
        params = {"reason": bounded(fields.get("reason"), 500, "the reason")}
    scope = viewer.principal.scope
    if fields.get("confirm") != "yes":
        plan = await node.bulk.dry_run(scope, what)
        ops = await node.bulk.list_operations(scope, before=None, limit=PAGE)
        return page("bulk.html", request, ops=ops, actions=TASK_ACTIONS, states=STATES,
                    fields={}, plan=None, sample=[], wf_fields=fields, wf_plan=plan,
                    wf_actions=WORKFLOW_ACTIONS, wf_states=WORKFLOW_STATES)  # fmt: skip
    document = {k: v for k, v in (("definition", definition), ("state", state),
                ("created_after", text(fields.get("created_after"))),
                ("created_before", text(fields.get("created_before")))) if v}  # fmt: skip
    op = await node.bulk.start(scope, action=action, what=what, filter_doc=document,
                               params=params, actor=viewer.actor)  # fmt: skip
    return back(request, f"{PREFIX}/bulk/{op.id}", f"Started: {op.matched} workflows selected.")


@get(f"{PREFIX}/bulk/{{op_id:str}}", include_in_schema=False)
async def bulk_op_page(request: Request[Any, Any, Any], op_id: FromPath[str]) -> Template:
    require_operations(request)
    node = request.app.state["node"]
    op = await node.bulk.get(scope_of(request), op_id)
    skipped = await node.bulk.items(scope_of(request), op_id, after=-1, limit=100)
    return page("bulk_op.html", request, op=op,
                passed=[i for i in skipped if i.state in ("skipped", "failed")])  # fmt: skip


@post(f"{PREFIX}/bulk/{{op_id:str}}/cancel", include_in_schema=False, status_code=303)
async def bulk_cancel(request: Request[Any, Any, Any], op_id: FromPath[str]) -> Redirect:
    require_operator(request)
    node = request.app.state["node"]
    viewer = viewer_of(request)
    await node.bulk.cancel(viewer.principal.scope, op_id, actor=viewer.actor)
    return back(request, f"{PREFIX}/bulk/{op_id}", "Stopped.")


@get(f"{PREFIX}/audit", include_in_schema=False)
async def audit_page(
    request: Request[Any, Any, Any],
    actor: FromQuery[str | None] = None,
    action: FromQuery[str | None] = None,
    target_kind: FromQuery[str | None] = None,
    target_id: FromQuery[str | None] = None,
    cursor: FromQuery[str | None] = None,
) -> Template:
    """The audit log, newest first; by object with the index, by actor and action on the page
    read (a sparse filter may show a short page with a link to the next)."""
    require_operations(request)
    node = request.app.state["node"]
    target = (text(target_kind), text(target_id))
    records = await node.audit.list(
        scope_of(request), limit=PAGE, before=text(cursor),
        target=target if target[0] and target[1] else None,
    )  # fmt: skip
    last = records[-1].id if len(records) == PAGE else None
    shown = [r for r in records if (not text(actor) or r.actor == text(actor))
             and (not text(action) or r.action.startswith(text(action) or ""))]  # fmt: skip
    filters = {"actor": actor or "", "action": action or "", "target_kind": target_kind or "",
               "target_id": target_id or ""}  # fmt: skip
    return page("audit.html", request, records=shown, filters=filters,
                next_url=next_url(request, last))  # fmt: skip


ROUTES = [workers_page, worker_page, bulk_page, bulk_submit, bulk_workflows_submit, bulk_op_page,
          bulk_cancel,
          audit_page]  # fmt: skip
