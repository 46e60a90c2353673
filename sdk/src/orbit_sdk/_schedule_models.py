"""The schedule wire contract: typed objects, and for each call what it sends and reads.

As in ``_models``, objects decode leniently (fields a later server adds are ignored) and every
call is first described as an :class:`~orbit_sdk._models.Operation`, without I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, Literal, TypeAlias

import msgspec
from msgspec import UNSET, UnsetType

from orbit_sdk._models import Operation, RetryPolicy, TaskRequest, _segment

__all__ = [
    "Backfill",
    "Catchup",
    "FirePage",
    "Overlap",
    "Schedule",
    "ScheduleFire",
    "SchedulePage",
    "ScheduleTask",
    "TaskTemplate",
    "backfill_get",
    "backfill_list",
    "fire_list",
    "schedule_backfill",
    "schedule_create",
    "schedule_delete",
    "schedule_get",
    "schedule_list",
    "schedule_pause",
    "schedule_resume",
    "schedule_trigger",
    "schedule_update",
]

Catchup: TypeAlias = Literal["skip", "latest", "all"]
Overlap: TypeAlias = Literal["skip", "allow", "queue_one"]


class ScheduleTask(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The task a schedule makes at each of its slots: a submission without ``idempotency_key``,
    ``run_at`` or ``delay_ms`` (each slot's task has its own identity and runs at its slot).

    Passed to ``create_schedule`` or ``update_schedule`` it sends only the fields given, so
    Orbit's defaults apply to the others, as for ``submit``. Read from a schedule it holds what
    was given; ``retry`` is ``None`` when the tasks take Orbit's default policy.
    """

    queue: str
    type: str
    params: Any = None
    priority: int | None = None
    retry: RetryPolicy | None = None
    timeout_ms: int | None = None
    concurrency_key: str | None = None
    fairness_key: str | None = None
    side_effect: str | None = None
    """``idempotent`` or ``unsafe``."""
    handler_version: str | None = None
    labels: dict[str, str] | None = None


TaskTemplate: TypeAlias = ScheduleTask | TaskRequest | Mapping[str, Any]
"""A task template as the schedule calls take it: a :class:`ScheduleTask`, a
:class:`~orbit_sdk.TaskRequest` without ``idempotency_key``, ``run_at`` or ``delay_ms``, or a
mapping shaped like the HTTP ``task`` object (sent as it is)."""


class ScheduleFire(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of a schedule's fire ledger: what became of one slot."""

    fire_time: datetime
    """The slot: the time the schedule planned, not the time the task was made."""
    task_id: str | None = None
    """The task made for the slot; ``None`` when none was (``missed``, ``skipped``, ``paused``,
    or ``queued`` until it fires)."""
    outcome: str
    """``fired``, ``skipped`` (overlap policy), ``missed`` (catch-up policy), ``paused`` or
    ``queued`` (overlap ``queue_one``: waits for the previous task)."""
    cause: str
    """``schedule`` (on time), ``catchup``, ``trigger`` or ``backfill``."""
    recorded_at: datetime


class Schedule(msgspec.Struct, frozen=True, kw_only=True):
    """A schedule as Orbit reports it. Times are timezone-aware UTC datetimes.

    It has ``cron`` (read in ``timezone``) or ``interval_ms``, never both. Fields that can be
    ``null`` default to ``None``; fields Orbit adds later are ignored.
    """

    name: str
    id: str
    version: int
    """1 when created, one more with each change (``update_schedule``)."""
    cron: str | None = None
    timezone: str | None = None
    interval_ms: int | None = None
    task: ScheduleTask
    catchup: str
    """``skip``, ``latest`` or ``all``: what becomes of missed slots."""
    catchup_max: int
    """How many missed slots ``all`` fires at most."""
    overlap: str
    """``skip``, ``allow`` or ``queue_one``: what a slot does while the previous task runs."""
    start_at: datetime | None = None
    end_at: datetime | None = None
    paused: bool
    paused_reason: str | None = None
    next_fire_at: datetime | None = None
    """The next slot; ``None`` once the schedule has ended or will never fire again."""
    last_fire_at: datetime | None = None
    last_task_id: str | None = None
    queued_fire_at: datetime | None = None
    """The slot waiting for the previous task (overlap ``queue_one``), if any."""
    recent: list[ScheduleFire] = msgspec.field(default_factory=list)
    """The newest ledger entries (up to 10), newest first."""
    preview: list[datetime] | None = None
    """The next fire times, when asked for with ``get_schedule(name, preview=N)``."""
    failure: str | None = None
    """Why the scheduler could not fire it at its last try (it tries again a minute later);
    ``None`` once it fires."""
    created_at: datetime
    updated_at: datetime


class Backfill(msgspec.Struct, frozen=True, kw_only=True):
    """A backfill: every slot of ``[start, end)`` that has no task yet gets one."""

    id: str
    schedule: str
    """The schedule's name."""
    start: datetime = msgspec.field(name="from")
    end: datetime = msgspec.field(name="to")
    state: str
    """``running``, ``done`` or ``failed`` (``failure`` says why)."""
    cursor: datetime | None = None
    """The last slot handled so far."""
    fired: int
    """Slots that got a task."""
    existing: int
    """Slots left alone because they already had one."""
    created_at: datetime
    finished_at: datetime | None = None
    failure: str | None = None
    """Why the backfill failed, when ``state`` is ``failed``."""


class SchedulePage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of schedules, by name. ``next_cursor`` is ``None`` on the last page."""

    items: list[Schedule]
    next_cursor: str | None = None


class FirePage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of a schedule's fire ledger, newest first. ``next_cursor`` is ``None`` on the
    last page."""

    items: list[ScheduleFire]
    next_cursor: str | None = None


class _BackfillList(msgspec.Struct, frozen=True):
    items: list[Backfill]


_schedule: Final = msgspec.json.Decoder(Schedule)
_schedule_page: Final = msgspec.json.Decoder(SchedulePage)
_fire: Final = msgspec.json.Decoder(ScheduleFire)
_fire_page: Final = msgspec.json.Decoder(FirePage)
_backfill: Final = msgspec.json.Decoder(Backfill)
_backfill_list: Final = msgspec.json.Decoder(_BackfillList)

# What a schedule's task cannot have: each slot makes its own task, at the slot's time.
_NOT_IN_TEMPLATES: Final = ("idempotency_key", "run_at", "delay_ms")


def _template(task: TaskTemplate) -> ScheduleTask | dict[str, Any]:
    if isinstance(task, ScheduleTask):
        return task
    if isinstance(task, TaskRequest):
        given = [name for name in _NOT_IN_TEMPLATES if getattr(task, name) is not None]
        if given:
            raise ValueError(
                f"a schedule's task cannot have {', '.join(given)}: "
                "each slot makes its own task at the slot's time"
            )
        return ScheduleTask(
            queue=task.queue,
            type=task.type,
            params=task.params,
            priority=task.priority,
            retry=task.retry,
            timeout_ms=task.timeout_ms,
            concurrency_key=task.concurrency_key,
            fairness_key=task.fairness_key,
            side_effect=task.side_effect,
            handler_version=task.handler_version,
            labels=task.labels,
        )
    return dict(task)


def _instant(field: str, value: datetime | str) -> datetime | str:
    # Strings go as they are: Orbit checks that they carry an offset.
    if isinstance(value, datetime) and value.utcoffset() is None:
        raise ValueError(f"{field} must be timezone-aware, e.g. datetime.now(UTC)")
    return value


def _path(name: str, *rest: str) -> str:
    return "/".join(["/v1/schedules", _segment(name), *rest])


def schedule_create(
    name: str,
    task: TaskTemplate,
    *,
    cron: str | None,
    timezone: str | None,
    interval_ms: int | None,
    catchup: Catchup | None,
    catchup_max: int | None,
    overlap: Overlap | None,
    start_at: datetime | str | None,
    end_at: datetime | str | None,
    paused: bool,
) -> Operation[Schedule]:
    """``POST /v1/schedules``: the fields given; ``paused`` only when ``True``."""
    body: dict[str, Any] = {"name": name, "task": _template(task)}
    body.update(_given(cron, timezone, interval_ms, catchup, catchup_max, overlap))
    if start_at is not None:
        body["start_at"] = _instant("start_at", start_at)
    if end_at is not None:
        body["end_at"] = _instant("end_at", end_at)
    if paused:
        body["paused"] = True
    return Operation("POST", "/v1/schedules", _schedule.decode, body)


def _given(
    cron: str | None,
    timezone: str | None,
    interval_ms: int | None,
    catchup: Catchup | None,
    catchup_max: int | None,
    overlap: Overlap | None,
) -> dict[str, Any]:
    """The timing and policy fields that were given (not None), by their HTTP names."""
    fields = {
        "cron": cron,
        "timezone": timezone,
        "interval_ms": interval_ms,
        "catchup": catchup,
        "catchup_max": catchup_max,
        "overlap": overlap,
    }
    return {field: value for field, value in fields.items() if value is not None}


def schedule_get(name: str, *, preview: int | None) -> Operation[Schedule]:
    """``GET /v1/schedules/{name}``, with the next ``preview`` fire times when given."""
    params = None if preview is None else {"preview": preview}
    return Operation("GET", _path(name), _schedule.decode, params=params)


def schedule_list(*, limit: int | None, cursor: str | None) -> Operation[SchedulePage]:
    """``GET /v1/schedules``: one page, by name."""
    params = {"limit": limit, "cursor": cursor}
    return Operation("GET", "/v1/schedules", _schedule_page.decode, params=params)


def schedule_update(
    name: str,
    *,
    version: int | None,
    task: TaskTemplate | None,
    cron: str | None,
    timezone: str | None,
    interval_ms: int | None,
    catchup: Catchup | None,
    catchup_max: int | None,
    overlap: Overlap | None,
    start_at: datetime | str | UnsetType | None,
    end_at: datetime | str | UnsetType | None,
) -> Operation[Schedule]:
    """``PATCH /v1/schedules/{name}``: only the fields given; ``None`` bounds are cleared."""
    body: dict[str, Any] = {}
    if version is not None:
        body["version"] = version
    if task is not None:
        body["task"] = _template(task)
    body.update(_given(cron, timezone, interval_ms, catchup, catchup_max, overlap))
    if start_at is not UNSET:
        body["start_at"] = None if start_at is None else _instant("start_at", start_at)
    if end_at is not UNSET:
        body["end_at"] = None if end_at is None else _instant("end_at", end_at)
    return Operation("PATCH", _path(name), _schedule.decode, body)


def schedule_delete(name: str) -> Operation[None]:
    """``DELETE /v1/schedules/{name}``: answered ``204``, without a body."""
    return Operation("DELETE", _path(name), lambda _body: None)


def schedule_pause(name: str, reason: str | None) -> Operation[Schedule]:
    """``POST /v1/schedules/{name}/pause``, with a body only when there is a reason."""
    body = None if reason is None else {"reason": reason}
    return Operation("POST", _path(name, "pause"), _schedule.decode, body)


def schedule_resume(name: str) -> Operation[Schedule]:
    """``POST /v1/schedules/{name}/resume``."""
    return Operation("POST", _path(name, "resume"), _schedule.decode)


def schedule_trigger(name: str) -> Operation[ScheduleFire]:
    """``POST /v1/schedules/{name}/trigger``: the ledger entry of the fire it made."""
    return Operation("POST", _path(name, "trigger"), _fire.decode)


def schedule_backfill(name: str, start: datetime | str, end: datetime | str) -> Operation[Backfill]:
    """``POST /v1/schedules/{name}/backfill`` over ``[start, end)``, sent as ``from``/``to``."""
    body = {"from": _instant("start", start), "to": _instant("end", end)}
    return Operation("POST", _path(name, "backfill"), _backfill.decode, body)


def backfill_get(name: str, backfill_id: str) -> Operation[Backfill]:
    """``GET /v1/schedules/{name}/backfills/{id}``."""
    return Operation("GET", _path(name, "backfills", _segment(backfill_id)), _backfill.decode)


def backfill_list(name: str) -> Operation[list[Backfill]]:
    """``GET /v1/schedules/{name}/backfills``: all of them, newest first."""
    path = _path(name, "backfills")
    return Operation("GET", path, lambda body: _backfill_list.decode(body).items)


def fire_list(name: str, *, limit: int | None, cursor: str | None) -> Operation[FirePage]:
    """``GET /v1/schedules/{name}/fires``: one page of the ledger, newest first."""
    params = {"limit": limit, "cursor": cursor}
    return Operation("GET", _path(name, "fires"), _fire_page.decode, params=params)
