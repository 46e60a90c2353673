"""Schedules (API.md "Schedules"): create, read, change, delete, pause, resume, trigger now,
backfill, and the fire ledger."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec
from litestar import Response, delete, get, patch, post
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter
from msgspec import UNSET

from orbit_server.api.auth import actor_of, roles
from orbit_server.api.deps import NodeDep, PrincipalDep
from orbit_server.api.openapi import BODY, KEYED, error_responses
from orbit_server.api.pagination import decode_cursor, encode_cursor, next_cursor, page_limit
from orbit_server.api.quota import take_submit_quota
from orbit_server.api.routes.tasks import to_spec
from orbit_server.api.wire_schedules import (
    Backfill,
    BackfillIn,
    BackfillList,
    Fire,
    FireList,
    PauseIn,
    Schedule,
    ScheduleIn,
    ScheduleList,
    SchedulePatch,
)
from orbit_server.api.wire_tasks import TaskSubmit, TaskTemplate
from orbit_server.config import Settings
from orbit_server.errors import (
    AlreadyExists,
    InvalidRequest,
    NotFound,
    QueueFull,
    RateLimited,
    StateConflict,
)
from orbit_server.governance.keys import Principal, Role
from orbit_server.pulse.schedules import Catchup, Definition, Overlap, TimingSpec
from orbit_server.runtime.node import Node

READERS = (Role.SUBMITTER, Role.OPERATOR, Role.ADMIN)
OPERATORS = (Role.OPERATOR,)
MAX_BACKFILLS = 100
PATCHABLE = ("cron", "timezone", "interval_ms", "catchup", "catchup_max", "overlap", "start_at",
             "end_at")  # fmt: skip
BAD_CURSOR = "the cursor is not valid; use next_cursor from a list answer"


def template_of(task: TaskTemplate, settings: Settings) -> dict[str, Any]:
    """The task template as stored, after the checks a submission of it would pass."""
    fields = msgspec.structs.asdict(task)
    to_spec(TaskSubmit(**fields), settings, None)
    return msgspec.to_builtins(task)  # type: ignore[no-any-return]


def _take_backfill_quota(node: Node, principal: Principal, slots: int) -> None:
    """A backfill's slots count against the key's submit rate, as a batch of that many tasks
    would."""
    take_submit_quota(
        node, principal, slots, what=f"the range holds {slots} slots; ",
        advice=": split it into shorter ranges", details={"slots": slots},
    )  # fmt: skip


async def _view(node: Node, principal: Principal, name: str) -> Schedule:
    return Schedule.of(await node.schedules.get(principal.scope, name))


@post(
    "/v1/schedules",
    summary="Create a schedule",
    tags=["schedules"],
    status_code=201,
    opt=roles(*OPERATORS),
    responses=error_responses(*KEYED, *BODY, AlreadyExists),
)
async def create_schedule(
    data: JSONBody[ScheduleIn], principal: PrincipalDep, node: NodeDep
) -> Response[Schedule]:
    if (data.cron is None) == (data.interval_ms is None):
        raise InvalidRequest("give exactly one of cron and interval_ms")
    definition = Definition(
        timing=TimingSpec(data.cron, data.timezone, data.interval_ms),
        task=template_of(data.task, node.settings),
        catchup=Catchup(data.catchup),
        catchup_max=data.catchup_max,
        overlap=Overlap(data.overlap),
        start_at=data.start_at,
        end_at=data.end_at,
    )
    _, created = await node.schedules.create(
        principal.scope, data.name, definition, paused=data.paused, actor=actor_of(principal)
    )
    return Response(await _view(node, principal, data.name), status_code=201 if created else 200)


@get(
    "/v1/schedules",
    summary="Schedules, by name",
    tags=["schedules"],
    opt=roles(*READERS),
    responses=error_responses(*KEYED, InvalidRequest),
)
async def list_schedules(
    principal: PrincipalDep,
    node: NodeDep,
    limit: Annotated[int | None, QueryParameter(ge=1, le=500)] = None,
    cursor: FromQuery[str | None] = None,
) -> ScheduleList:
    size = page_limit(limit)
    views = await node.schedules.list_schedules(
        principal.scope, after=decode_cursor(cursor), limit=size
    )
    return ScheduleList(
        items=[Schedule.of(v) for v in views],
        next_cursor=next_cursor([v.schedule.name for v in views], size),
    )


@get(
    "/v1/schedules/{name:str}",
    summary="One schedule; preview=N adds its next N fire times",
    tags=["schedules"],
    opt=roles(*READERS),
    responses=error_responses(*KEYED, InvalidRequest, NotFound),
)
async def get_schedule(
    name: FromPath[str],
    principal: PrincipalDep,
    node: NodeDep,
    preview: Annotated[int | None, QueryParameter(ge=1, le=100)] = None,
) -> Schedule:
    return Schedule.of(await node.schedules.get(principal.scope, name, preview_count=preview or 0))


@patch(
    "/v1/schedules/{name:str}",
    summary="Change a schedule (a new version)",
    tags=["schedules"],
    opt=roles(*OPERATORS),
    responses=error_responses(*KEYED, *BODY, NotFound, StateConflict),
)
async def update_schedule(
    name: FromPath[str], data: JSONBody[SchedulePatch], principal: PrincipalDep, node: NodeDep
) -> Schedule:
    changes = {field: value for field in PATCHABLE if (value := getattr(data, field)) is not UNSET}
    if "catchup" in changes:
        changes["catchup"] = Catchup(changes["catchup"])
    if "overlap" in changes:
        changes["overlap"] = Overlap(changes["overlap"])
    if data.task is not UNSET:
        changes["task"] = template_of(data.task, node.settings)
    await node.schedules.update(
        principal.scope, name, changes,
        expected_version=None if data.version is UNSET else data.version,
        actor=actor_of(principal),
    )  # fmt: skip
    return await _view(node, principal, name)


@delete(
    "/v1/schedules/{name:str}",
    summary="Delete a schedule",
    tags=["schedules"],
    opt=roles(*OPERATORS),
    responses=error_responses(*KEYED, NotFound),
)
async def delete_schedule(name: FromPath[str], principal: PrincipalDep, node: NodeDep) -> None:
    await node.schedules.delete(principal.scope, name, actor=actor_of(principal))


@post(
    "/v1/schedules/{name:str}/pause",
    summary="Pause a schedule",
    tags=["schedules"],
    status_code=200,
    opt=roles(*OPERATORS),
    responses=error_responses(*KEYED, *BODY, NotFound),
)
async def pause_schedule(
    name: FromPath[str],
    principal: PrincipalDep,
    node: NodeDep,
    data: JSONBody[PauseIn | None] = None,
) -> Schedule:
    reason = data.reason if data is not None else None
    await node.schedules.pause(principal.scope, name, reason=reason, actor=actor_of(principal))
    return await _view(node, principal, name)


@post(
    "/v1/schedules/{name:str}/resume",
    summary="Resume a schedule",
    tags=["schedules"],
    status_code=200,
    opt=roles(*OPERATORS),
    responses=error_responses(*KEYED, NotFound),
)
async def resume_schedule(name: FromPath[str], principal: PrincipalDep, node: NodeDep) -> Schedule:
    await node.schedules.resume(principal.scope, name, actor=actor_of(principal))
    return await _view(node, principal, name)


@post(
    "/v1/schedules/{name:str}/trigger",
    summary="Fire a schedule now",
    tags=["schedules"],
    status_code=201,
    opt=roles(*OPERATORS),
    responses=error_responses(*KEYED, NotFound, QueueFull),
)
async def trigger_schedule(name: FromPath[str], principal: PrincipalDep, node: NodeDep) -> Fire:
    return Fire.of(await node.schedules.trigger(principal.scope, name, actor=actor_of(principal)))


@post(
    "/v1/schedules/{name:str}/backfill",
    summary="Fire the slots of a past time range that have no task",
    tags=["schedules"],
    status_code=202,
    opt=roles(*OPERATORS),
    responses=error_responses(*KEYED, *BODY, NotFound, RateLimited),
)
async def backfill_schedule(
    name: FromPath[str], data: JSONBody[BackfillIn], principal: PrincipalDep, node: NodeDep
) -> Backfill:
    record = await node.schedules.backfill(
        principal.scope, name, data.from_, data.to, actor=actor_of(principal),
        max_slots=node.settings.schedule_backfill_max_slots,
        admit=lambda slots: _take_backfill_quota(node, principal, slots),
    )  # fmt: skip
    return Backfill.of(record)


@get(
    "/v1/schedules/{name:str}/backfills",
    summary="A schedule's backfills, newest first",
    tags=["schedules"],
    opt=roles(*READERS),
    responses=error_responses(*KEYED, NotFound),
)
async def list_backfills(
    name: FromPath[str], principal: PrincipalDep, node: NodeDep
) -> BackfillList:
    found = await node.schedules.backfills(principal.scope, name, limit=MAX_BACKFILLS)
    return BackfillList(items=[Backfill.of(b) for b in found], next_cursor=None)


@get(
    "/v1/schedules/{name:str}/backfills/{backfill_id:str}",
    summary="One backfill",
    tags=["schedules"],
    opt=roles(*READERS),
    responses=error_responses(*KEYED, NotFound),
)
async def get_backfill(
    name: FromPath[str], backfill_id: FromPath[str], principal: PrincipalDep, node: NodeDep
) -> Backfill:
    return Backfill.of(await node.schedules.backfill_status(principal.scope, name, backfill_id))


@get(
    "/v1/schedules/{name:str}/fires",
    summary="A schedule's fire ledger, newest first",
    tags=["schedules"],
    opt=roles(*READERS),
    responses=error_responses(*KEYED, InvalidRequest, NotFound),
)
async def list_fires(
    name: FromPath[str],
    principal: PrincipalDep,
    node: NodeDep,
    limit: Annotated[int | None, QueryParameter(ge=1, le=500)] = None,
    cursor: FromQuery[str | None] = None,
) -> FireList:
    size = page_limit(limit)
    position = decode_cursor(cursor)
    try:
        before = None if position is None else datetime.fromisoformat(position)
        if before is not None and before.tzinfo is None:
            raise ValueError(position)
    except ValueError:
        raise InvalidRequest(BAD_CURSOR) from None
    fires = await node.schedules.fires(principal.scope, name, before=before, limit=size)
    last = fires[-1].fire_at.isoformat() if len(fires) == size else None
    return FireList(
        items=[Fire.of(f) for f in fires], next_cursor=encode_cursor(last) if last else None
    )
