"""Workflows: instances with filters, one instance with its graph coloured by step state, its
step history, waits and pending signals, and its control (pause, resume, cancel, signal, a
step's retry, skip and resolution); definitions and their versions."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, get, post
from litestar.params import FromPath, FromQuery, QueryParameter
from litestar.response import Redirect, Template

from orbit_server.console import graph
from orbit_server.console.app import PREFIX, back, form, page, viewer_of
from orbit_server.console.pages.common import (
    PAGE,
    bounded,
    json_field,
    next_url,
    require,
    scope_of,
    text,
)
from orbit_server.console.session import CANCELLERS, CONTROLLERS, WRITERS
from orbit_server.errors import InvalidRequest
from orbit_server.weave.states import WorkflowState

STATES = [str(s) for s in WorkflowState]


@get(f"{PREFIX}/workflows", include_in_schema=False)
async def workflows_page(
    request: Request[Any, Any, Any],
    definition: FromQuery[str | None] = None,
    state_filter: Annotated[str | None, QueryParameter(name="state")] = None,
    cursor: FromQuery[str | None] = None,
) -> Template:
    node = request.app.state["node"]
    state = text(state_filter)
    if state is not None and state not in STATES:
        raise InvalidRequest(f"unknown state {state!r}")
    found = await node.workflows.list_workflows(
        scope_of(request), definition=text(definition), state=state, before=text(cursor),
        limit=PAGE,
    )  # fmt: skip
    last = found[-1].id if len(found) == PAGE else None
    definitions = await node.workflows.list_definitions(
        scope_of(request), name=None, after=None, limit=100
    )
    return page("workflows.html", request, workflows=found, states=STATES,
                filters={"definition": definition or "", "state": state or ""},
                definitions=definitions, next_url=next_url(request, last))  # fmt: skip


@get(f"{PREFIX}/workflows/{{workflow_id:str}}", include_in_schema=False)
async def workflow_page(request: Request[Any, Any, Any], workflow_id: FromPath[str]) -> Template:
    node = request.app.state["node"]
    scope = scope_of(request)
    seen = await node.workflows.inspect(scope, workflow_id)
    wf = seen.workflow
    stored = await node.workflows.definition(scope, wf.definition, wf.version)
    latest: dict[str, str] = {}
    for step in sorted(seen.steps, key=lambda s: s.seq):
        latest[step.step] = str(step.state)
    return page("workflow.html", request, wf=wf, seen=seen,
                graph=graph.render(stored.body, latest))  # fmt: skip


@get(f"{PREFIX}/workflows/{{workflow_id:str}}/steps", include_in_schema=False)
async def workflow_steps_page(
    request: Request[Any, Any, Any],
    workflow_id: FromPath[str],
    cursor: FromQuery[str | None] = None,
) -> Template:
    """Every step execution, map items and poll rounds too, in the order they began."""
    node = request.app.state["node"]
    after = text(cursor)
    if after is not None and not after.isdigit():
        raise InvalidRequest("the cursor is not valid")
    rows = await node.workflows.steps(
        scope_of(request), workflow_id, after=int(after or -1), limit=PAGE
    )
    last = str(rows[-1].seq) if len(rows) == PAGE else None
    return page("workflow_steps.html", request, workflow_id=workflow_id, rows=rows,
                next_url=next_url(request, last))  # fmt: skip


@get(f"{PREFIX}/definitions/{{name:str}}/{{version:str}}", include_in_schema=False)
async def definition_page(
    request: Request[Any, Any, Any], name: FromPath[str], version: FromPath[str]
) -> Template:
    node = request.app.state["node"]
    stored = await node.workflows.definition(scope_of(request), name, version)
    return page("definition.html", request, stored=stored, graph=graph.render(stored.body))


@post(f"{PREFIX}/workflows/{{workflow_id:str}}/{{what:str}}", include_in_schema=False,
      status_code=303)  # fmt: skip
async def workflow_control(
    request: Request[Any, Any, Any], workflow_id: FromPath[str], what: FromPath[str]
) -> Redirect:
    """pause, resume, cancel, signal, and retry/skip/resolve of a step (``key`` field)."""
    node = request.app.state["node"]
    viewer = viewer_of(request)
    scope, actor = viewer.principal.scope, viewer.actor
    fields = form(request)
    control = node.workflow_control
    reason = bounded(fields.get("reason"), 500, "the reason")
    if what == "signal":
        require(request, WRITERS)
        name = bounded(fields.get("name"), 128, "the signal's name")
        if not name or any(c.isspace() for c in name):
            raise InvalidRequest("a signal's name has 1 to 128 characters and no spaces")
        payload = json_field(fields.get("payload"))
        await node.workflows.signal(
            scope, workflow_id, name=name, payload=payload, idempotency_key=None
        )
        return back(request, f"{PREFIX}/workflows/{workflow_id}", "Signal sent.")
    require(request, CANCELLERS if what == "cancel" else CONTROLLERS)
    key = bounded(fields.get("key"), 160, "the step's key") or ""
    if what == "pause":
        await control.pause(scope, workflow_id, reason=reason, actor=actor)
    elif what == "resume":
        await control.resume(scope, workflow_id, reason=reason, actor=actor)
    elif what == "cancel":
        await control.cancel(scope, workflow_id, reason=reason, actor=actor)
    elif what == "retry-step":
        await control.retry_step(scope, workflow_id, key, actor=actor)
    elif what == "skip-step":
        await control.skip_step(scope, workflow_id, key, output=json_field(fields.get("output")),
                                actor=actor)  # fmt: skip
    elif what == "resolve-step":
        succeeded = fields.get("outcome") == "succeeded"
        error = None if succeeded else {"code": text(fields.get("code")) or "resolved_failed",
                                        "message": fields.get("message", "")}  # fmt: skip
        await control.resolve_step(scope, workflow_id, key, succeeded=succeeded,
                                   output=json_field(fields.get("output")), error=error,
                                   actor=actor)  # fmt: skip
    else:
        raise InvalidRequest(f"unknown control {what!r}")
    return back(
        request,
        f"{PREFIX}/workflows/{workflow_id}",
        f"{what.replace('-', ' ').capitalize()}: done.",
    )


ROUTES = [workflows_page, workflow_page, workflow_steps_page, definition_page, workflow_control]
