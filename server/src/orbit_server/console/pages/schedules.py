"""Schedules: the timetable with next fires, one schedule with its fire ledger (fired, missed,
skipped, with why) and preview; pause, resume, trigger and backfill (with a preview of the
slots it would fire)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from litestar import Request, get, post
from litestar.params import FromPath
from litestar.response import Redirect, Template

from orbit_server.console.app import PREFIX, back, form, page, viewer_of
from orbit_server.console.pages.common import require_operator, scope_of, text
from orbit_server.errors import InvalidRequest

SHOWN = 500
PREVIEW = 10
LEDGER = 100


@get(f"{PREFIX}/schedules", include_in_schema=False)
async def schedules_page(request: Request[Any, Any, Any]) -> Template:
    node = request.app.state["node"]
    views = await node.schedules.list_schedules(scope_of(request), after=None, limit=SHOWN)
    return page("schedules.html", request, views=views)


@get(f"{PREFIX}/schedules/{{name:str}}", include_in_schema=False)
async def schedule_page(request: Request[Any, Any, Any], name: FromPath[str]) -> Template:
    node = request.app.state["node"]
    scope = scope_of(request)
    view = await node.schedules.get(scope, name, preview_count=PREVIEW)
    fires = await node.schedules.fires(scope, name, before=None, limit=LEDGER)
    backfills = await node.schedules.backfills(scope, name, limit=10)
    return page("schedule.html", request, view=view, fires=fires, backfills=backfills)


def _moment(raw: str | None, what: FromPath[str]) -> datetime:
    value = text(raw)
    try:
        moment = datetime.fromisoformat(value or "")
    except ValueError:
        raise InvalidRequest(f"{what} must be a time like 2026-11-01T00:00:00Z") from None
    if moment.tzinfo is None:
        raise InvalidRequest(f"{what} needs a time zone (Z or +01:00)")
    return moment


@post(f"{PREFIX}/schedules/{{name:str}}/{{what:str}}", include_in_schema=False,
      status_code=303)  # fmt: skip
async def schedule_control(
    request: Request[Any, Any, Any], name: FromPath[str], what: FromPath[str]
) -> Redirect:
    require_operator(request)
    node = request.app.state["node"]
    viewer = viewer_of(request)
    scope, actor = viewer.principal.scope, viewer.actor
    fields = form(request)
    here = f"{PREFIX}/schedules/{name}"
    if what == "pause":
        await node.schedules.pause(scope, name, reason=text(fields.get("reason")), actor=actor)
        return back(here, "Paused.")
    if what == "resume":
        await node.schedules.resume(scope, name, actor=actor)
        return back(here, "Resumed.")
    if what == "trigger":
        fired = await node.schedules.trigger(scope, name, actor=actor)
        return back(here, f"Fired now: task {fired.task_id or '(none)'}.")
    if what == "backfill":
        start = _moment(fields.get("from"), "From")
        end = _moment(fields.get("to"), "To")
        if fields.get("confirm") != "yes":
            return back(f"{here}?from={fields.get('from')}&to={fields.get('to')}",
                        "Check the range below, then confirm.")  # fmt: skip
        await node.schedules.backfill(scope, name, start, end, actor=actor)
        return back(here, "Backfill started: its slots fire in the background.")
    raise InvalidRequest(f"unknown action {what!r}")


ROUTES = [schedules_page, schedule_page, schedule_control]
