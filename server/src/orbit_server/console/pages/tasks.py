"""Tasks: the list with filters, one task with its attempts, its recovery, and the review inbox
(every ``needs_review`` task and workflow step)."""

from __future__ import annotations

from typing import Annotated, Any, TypeGuard

from litestar import Request, get, post
from litestar.params import FromPath, FromQuery, QueryParameter
from litestar.response import Redirect, Template

from orbit_server.console.app import PREFIX, back, form, page, viewer_of
from orbit_server.console.pages.common import (
    PAGE,
    bounded,
    json_field,
    label_of,
    next_url,
    require,
    require_operator,
    scope_of,
    text,
)
from orbit_server.console.session import WRITERS
from orbit_server.errors import InvalidRequest
from orbit_server.pulse.states import TaskState

STATES = [str(s) for s in TaskState]
INBOX_SHOWN = 100


@get(f"{PREFIX}/tasks", include_in_schema=False)
async def tasks_page(
    request: Request[Any, Any, Any],
    queue: FromQuery[str | None] = None,
    state_filter: Annotated[str | None, QueryParameter(name="state")] = None,
    type_filter: Annotated[str | None, QueryParameter(name="type")] = None,
    label: FromQuery[str | None] = None,
    cursor: FromQuery[str | None] = None,
) -> Template:
    node = request.app.state["node"]
    state = text(state_filter)
    if state is not None and state not in STATES:
        raise InvalidRequest(f"unknown state {state!r}")
    found, last = await node.tasks.list_tasks(
        scope_of(request), limit=PAGE, before=text(cursor), queue=text(queue), state=state,
        type_=text(type_filter), label=label_of(text(label)),
    )  # fmt: skip
    filters = {"queue": queue or "", "state": state or "", "type": type_filter or "",
               "label": label or ""}  # fmt: skip
    return page("tasks.html", request, tasks=found, filters=filters, states=STATES,
                next_url=next_url(request, last))  # fmt: skip


@get(f"{PREFIX}/tasks/{{task_id:str}}", include_in_schema=False)
async def task_page(request: Request[Any, Any, Any], task_id: FromPath[str]) -> Template:
    node = request.app.state["node"]
    scope = scope_of(request)
    task = await node.tasks.get(scope, task_id)
    attempts = await node.tasks.attempts(scope, task_id)
    unserved = None
    if task.state == TaskState.PENDING:
        unserved = await node.worker_views.task_unserved(
            scope, task.queue, task.type, task.handler_version
        )
    latest = attempts[-1] if attempts else None
    progress = latest if latest is not None and latest.progress is not None else None
    return page("task.html", request, task=task, attempts=attempts, unserved=unserved,
                progress=progress, bar=_bar(progress.progress if progress else None))  # fmt: skip


def _bar(details: dict[str, Any] | None) -> tuple[float, float] | None:
    """``(done, total)`` when a progress report holds both as numbers, for a progress bar."""
    if not details:
        return None
    done, total = details.get("done"), details.get("total")
    if not (_number(done) and _number(total)):
        return None
    done, total = float(done), float(total)
    return (done, total) if 0 <= done <= total and total > 0 else None


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


@post(f"{PREFIX}/tasks/{{task_id:str}}/cancel", include_in_schema=False, status_code=303)
async def task_cancel(request: Request[Any, Any, Any], task_id: FromPath[str]) -> Redirect:
    require(request, WRITERS)
    node = request.app.state["node"]
    viewer = viewer_of(request)
    reason = bounded(form(request).get("reason"), 500, "the reason")
    await node.tasks.cancel(viewer.principal.scope, task_id, reason=reason, actor=viewer.actor)
    return back(request, f"{PREFIX}/tasks/{task_id}", "Cancel requested.")


@post(f"{PREFIX}/tasks/{{task_id:str}}/retry", include_in_schema=False, status_code=303)
async def task_retry(request: Request[Any, Any, Any], task_id: FromPath[str]) -> Redirect:
    require_operator(request)
    node = request.app.state["node"]
    viewer = viewer_of(request)
    await node.tasks.retry(viewer.principal.scope, task_id, actor=viewer.actor)
    return back(request, f"{PREFIX}/tasks/{task_id}", "Retried: a new attempt is pending.")


@post(f"{PREFIX}/tasks/{{task_id:str}}/resolve", include_in_schema=False, status_code=303)
async def task_resolve(request: Request[Any, Any, Any], task_id: FromPath[str]) -> Redirect:
    require_operator(request)
    node = request.app.state["node"]
    viewer = viewer_of(request)
    fields = form(request)
    outcome = fields.get("outcome")
    if outcome not in ("succeeded", "failed"):
        raise InvalidRequest("choose succeeded or failed")
    result: Any = None
    error = None
    if outcome == "succeeded":
        result = json_field(fields.get("result"), "the result")
    else:
        error = {"code": text(fields.get("code")) or "resolved_failed",
                 "message": fields.get("message", ""), "retryable": False}  # fmt: skip
    await node.tasks.resolve(
        viewer.principal.scope, task_id, succeeded=outcome == "succeeded", result=result,
        error=error, actor=viewer.actor,
    )  # fmt: skip
    back_to = text(fields.get("back")) or f"{PREFIX}/tasks/{task_id}"
    if not back_to.startswith(PREFIX + "/"):
        back_to = f"{PREFIX}/tasks/{task_id}"
    return back(request, back_to, f"Resolved as {outcome}.")


@get(f"{PREFIX}/inbox", include_in_schema=False)
async def inbox_page(request: Request[Any, Any, Any]) -> Template:
    """Every task and workflow waiting for a person's decision on an unknown outcome."""
    node = request.app.state["node"]
    scope = scope_of(request)
    found, last = await node.tasks.list_tasks(scope, limit=200, state=str(TaskState.NEEDS_REVIEW))
    flows = await node.workflows.list_workflows(
        scope, definition=None, state="needs_review", before=None, limit=200
    )
    attempts = await node.tasks.attempts_of_many(scope, [t.id for t in found])
    return page("inbox.html", request, tasks=found, workflows=flows, attempts=attempts,
                more=last is not None)  # fmt: skip


ROUTES = [tasks_page, task_page, task_cancel, task_retry, task_resolve, inbox_page]
