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
from orbit_server.console.pages.common import moment, require_operator, scope_of, text
from orbit_server.errors import InvalidRequest
from orbit_server.pulse.schedule_service import compiled, definition_of
from orbit_server.pulse.schedules import backfill_count, backfill_range, backfill_slots

SHOWN = 500
PREVIEW = 10
LEDGER = 100
BACKFILL_COUNTED = 10_000


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
    return page("schedule.html", request, view=view, fires=fires, backfills=backfills,
                backfill=None)  # fmt: skip


def _required_moment(raw: str | None, what: str) -> datetime:
    found = moment(raw, what)
    if found is None:
        raise InvalidRequest(f"{what} is needed")
    return found


@post(f"{PREFIX}/schedules/{{name:str}}/{{what:str}}", include_in_schema=False,
      status_code=303)  # fmt: skip
async def schedule_control(
    request: Request[Any, Any, Any], name: FromPath[str], what: FromPath[str]
) -> Redirect | Template:
    require_operator(request)
    node = request.app.state["node"]
    viewer = viewer_of(request)
    scope, actor = viewer.principal.scope, viewer.actor
    fields = form(request)
    here = f"{PREFIX}/schedules/{name}"
    if what == "pause":
        await node.schedules.pause(scope, name, reason=text(fields.get("reason")), actor=actor)
        return back(request, here, "Paused.")
    if what == "resume":
        await node.schedules.resume(scope, name, actor=actor)
        return back(request, here, "Resumed.")
    if what == "trigger":
        fired = await node.schedules.trigger(scope, name, actor=actor)
        return back(request, here, f"Fired now: task {fired.task_id or '(none)'}.")
    if what == "backfill":
        start = _required_moment(fields.get("from"), "From")
        end = _required_moment(fields.get("to"), "To")
        if end <= start:
            raise InvalidRequest("the range ends before it begins")
        if fields.get("confirm") != "yes":
            return await _backfill_preview(request, name, start, end, fields)
        await node.schedules.backfill(scope, name, start, end, actor=actor)
        return back(request, here, "Backfill started: its slots fire in the background.")
    raise InvalidRequest(f"unknown action {what!r}")


async def _backfill_preview(
    request: Request[Any, Any, Any],
    name: str,
    start: datetime,
    end: datetime,
    fields: dict[str, str],
) -> Template:
    """The schedule's page with the slots the backfill would fire (the first ones and how
    many), and a button to confirm. Slots that already have a task are left alone by it."""
    node = request.app.state["node"]
    scope = scope_of(request)
    view = await node.schedules.get(scope, name, preview_count=PREVIEW)
    s = view.schedule
    timing = compiled(definition_of(s), s.created_at)
    first, last = backfill_range(start, end, start_at=s.start_at, end_at=s.end_at,
                                 next_fire_at=s.next_fire_at)  # fmt: skip
    count, exact = backfill_count(timing, first, last, limit=BACKFILL_COUNTED)
    slots = backfill_slots(timing, first, last, None, budget=PREVIEW)
    fires = await node.schedules.fires(scope, name, before=None, limit=LEDGER)
    backfills = await node.schedules.backfills(scope, name, limit=10)
    preview = {"from": fields.get("from"), "to": fields.get("to"), "count": count,
               "exact": exact, "slots": slots}  # fmt: skip
    return page("schedule.html", request, view=view, fires=fires, backfills=backfills,
                backfill=preview)  # fmt: skip


ROUTES = [schedules_page, schedule_page, schedule_control]
