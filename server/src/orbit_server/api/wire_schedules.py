"""Wire models of the Schedules section of API.md."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from orbit_server.api.wire import Request
from orbit_server.api.wire_tasks import TaskTemplate
from orbit_server.clock import to_rfc3339
from orbit_server.pulse import schedule_model
from orbit_server.pulse.schedule_service import ScheduleView
from orbit_server.pulse.schedules import MAX_CATCHUP

ScheduleName = Annotated[
    str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
]
CronText = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Zone = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
IntervalMs = Annotated[int, msgspec.Meta(ge=1000, le=366 * 86_400_000)]
CatchupMax = Annotated[int, msgspec.Meta(ge=1, le=MAX_CATCHUP)]
Instant = Annotated[datetime, msgspec.Meta(tz=True)]
CatchupPolicy = Literal["skip", "latest", "all"]
OverlapPolicy = Literal["skip", "allow", "queue_one"]


class ScheduleIn(Request):
    name: ScheduleName
    task: TaskTemplate
    cron: CronText | None = None
    timezone: Zone = "UTC"
    interval_ms: IntervalMs | None = None
    catchup: CatchupPolicy = "latest"
    catchup_max: CatchupMax = 10
    overlap: OverlapPolicy = "skip"
    start_at: Instant | None = None
    end_at: Instant | None = None
    paused: bool = False


class SchedulePatch(Request):
    """Absent fields keep their value; ``cron`` replaces ``interval_ms`` and the reverse;
    ``start_at``/``end_at`` may be cleared with null; ``version`` is a precondition."""

    cron: CronText | UnsetType = UNSET
    timezone: Zone | UnsetType = UNSET
    interval_ms: IntervalMs | UnsetType = UNSET
    task: TaskTemplate | UnsetType = UNSET
    catchup: CatchupPolicy | UnsetType = UNSET
    catchup_max: CatchupMax | UnsetType = UNSET
    overlap: OverlapPolicy | UnsetType = UNSET
    start_at: Instant | UnsetType | None = UNSET
    end_at: Instant | UnsetType | None = UNSET
    version: Annotated[int, msgspec.Meta(ge=1)] | UnsetType = UNSET


class PauseIn(Request):
    reason: Annotated[str, msgspec.Meta(max_length=500)] | None = None


class BackfillIn(Request):
    from_: Instant = msgspec.field(name="from")
    to: Instant


class Fire(msgspec.Struct):
    fire_time: str
    task_id: str | None
    outcome: str
    cause: str
    recorded_at: str

    @classmethod
    def of(cls, fire: schedule_model.FireEntry) -> Fire:
        return cls(
            fire_time=to_rfc3339(fire.fire_at) or "",
            task_id=fire.task_id,
            outcome=fire.outcome,
            cause=fire.cause,
            recorded_at=to_rfc3339(fire.recorded_at) or "",
        )


class Schedule(msgspec.Struct, omit_defaults=True):
    name: str
    id: str
    version: int
    cron: str | None
    timezone: str
    interval_ms: int | None
    task: dict[str, Any]
    catchup: str
    catchup_max: int
    overlap: str
    start_at: str | None
    end_at: str | None
    paused: bool
    paused_reason: str | None
    next_fire_at: str | None
    last_fire_at: str | None
    last_task_id: str | None
    queued_fire_at: str | None
    recent: list[Fire]
    created_at: str
    updated_at: str
    failure: str | None
    preview: list[str] | UnsetType = UNSET

    @classmethod
    def of(cls, view: ScheduleView) -> Schedule:
        s = view.schedule
        return cls(
            name=s.name,
            id=s.id,
            version=s.version,
            cron=s.cron,
            timezone=s.timezone,
            interval_ms=s.interval_ms,
            task=s.task,
            catchup=s.catchup,
            catchup_max=s.catchup_max,
            overlap=s.overlap,
            start_at=to_rfc3339(s.start_at),
            end_at=to_rfc3339(s.end_at),
            paused=s.paused,
            paused_reason=s.paused_reason,
            next_fire_at=to_rfc3339(s.next_fire_at),
            last_fire_at=to_rfc3339(s.last_fire_at),
            last_task_id=s.last_task_id,
            queued_fire_at=to_rfc3339(s.queued_fire_at),
            recent=[Fire.of(f) for f in view.recent],
            created_at=to_rfc3339(s.created_at) or "",
            updated_at=to_rfc3339(s.updated_at) or "",
            failure=s.failure,
            preview=UNSET if view.preview is None else [to_rfc3339(t) or "" for t in view.preview],
        )


class ScheduleList(msgspec.Struct):
    items: list[Schedule]
    next_cursor: str | None


class FireList(msgspec.Struct):
    items: list[Fire]
    next_cursor: str | None


class Backfill(msgspec.Struct):
    id: str
    schedule: str
    from_: str = msgspec.field(name="from")
    to: str
    state: str
    cursor: str | None
    fired: int
    existing: int
    created_at: str
    finished_at: str | None
    failure: str | None

    @classmethod
    def of(cls, b: schedule_model.Backfill) -> Backfill:
        return cls(
            id=b.id,
            schedule=b.schedule,
            from_=to_rfc3339(b.from_at) or "",
            to=to_rfc3339(b.to_at) or "",
            state=str(b.state),
            cursor=to_rfc3339(b.cursor_at),
            fired=b.fired,
            existing=b.existing,
            created_at=to_rfc3339(b.created_at) or "",
            finished_at=to_rfc3339(b.finished_at),
            failure=b.failure,
        )


class BackfillList(msgspec.Struct):
    items: list[Backfill]
    next_cursor: str | None
