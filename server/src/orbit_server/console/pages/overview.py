"""The overview (queues with their depth, workers and unserved work) and a queue's page."""

from __future__ import annotations

from typing import Any

from litestar import Request, get, post
from litestar.params import FromPath
from litestar.response import Redirect, Template

from orbit_server.console.app import PREFIX, back, form, page, viewer_of
from orbit_server.console.pages.common import require_operator, scope_of, text
from orbit_server.errors import InvalidRequest
from orbit_server.pulse.service import QueueSettings

QUEUES_SHOWN = 500
COUNT_UPTO = 1_000  # counts by state stop here: finished tasks may be millions


@get([f"{PREFIX}/", PREFIX], include_in_schema=False)
async def overview_page(request: Request[Any, Any, Any]) -> Template:
    node = request.app.state["node"]
    scope = scope_of(request)
    views = await node.queues.list_queues(
        scope, limit=QUEUES_SHOWN, after=None, count_upto=COUNT_UPTO
    )
    workers = await node.sessions.workers_per_queue(scope)
    per_queue = await node.worker_views.unserved_upto(
        scope, [v.queue.name for v in views if v.queue.pending], upto=COUNT_UPTO
    )
    totals = {"pending": 0, "running": 0, "failed": 0, "needs_review": 0}
    for view in views:
        for name in totals:
            totals[name] += view.counts.get(name, 0)
    capped = {name: any(v.counts.get(name, 0) > COUNT_UPTO for v in views) for name in totals}
    throughput = await node.tasks.finished_per_minute(scope, minutes=60)
    return page("overview.html", request, queues=views, workers=workers, unserved=per_queue,
                totals=totals, capped=capped, unserved_total=sum(per_queue.values()),
                unserved_capped=any(n > COUNT_UPTO for n in per_queue.values()),
                throughput=throughput, peak=max([n for _, n in throughput] + [1]),
                now=node.clock.now())  # fmt: skip


@get(f"{PREFIX}/queues/{{name:str}}", include_in_schema=False)
async def queue_page(request: Request[Any, Any, Any], name: FromPath[str]) -> Template:
    node = request.app.state["node"]
    scope = scope_of(request)
    view = await node.queues.get(scope, name, count_upto=COUNT_UPTO)
    workers = (await node.sessions.workers_per_queue(scope)).get(name, 0)
    unserved = await node.worker_views.unserved(scope, queue=name)
    history = []
    if viewer_of(request).sees_operations:
        history = await node.audit.list(scope, limit=20, target=("queue", name))
    return page("queue.html", request, view=view, workers=workers, unserved=unserved,
                history=history, now=node.clock.now())  # fmt: skip


def _limit(value: str | None) -> int | None:
    raw = text(value)
    if raw is None:
        return None
    try:
        number = int(raw)
    except ValueError:
        raise InvalidRequest(f"{raw!r} is not a number") from None
    if number < 1:
        raise InvalidRequest("limits are positive numbers; leave the field empty for none")
    return number


@post(f"{PREFIX}/queues/{{name:str}}", include_in_schema=False, status_code=303)
async def queue_update(request: Request[Any, Any, Any], name: FromPath[str]) -> Redirect:
    """Pause, resume, or change the limits (an empty limit field removes the limit)."""
    require_operator(request)
    node = request.app.state["node"]
    viewer = viewer_of(request)
    fields = form(request)
    what = fields.get("do")
    if what in ("pause", "resume"):
        change = QueueSettings(paused=what == "pause")
        note = "Paused." if what == "pause" else "Resumed."
    else:
        limit = _limit(fields.get("concurrency_limit"))
        most = _limit(fields.get("max_pending"))
        change = QueueSettings(
            concurrency_limit=limit, clear_concurrency_limit=limit is None,
            key_concurrency=_limit(fields.get("key_concurrency")),
            max_pending=most, clear_max_pending=most is None,
        )  # fmt: skip
        note = "Limits saved."
    await node.queues.update(viewer.principal.scope, name, change, actor=viewer.actor)
    return back(request, f"{PREFIX}/queues/{name}", note)


ROUTES = [overview_page, queue_page, queue_update]
