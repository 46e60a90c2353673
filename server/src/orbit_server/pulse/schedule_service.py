"""Schedules for operators (SPEC P9): create, read, change, pause, resume, trigger now,
backfill and delete — one short transaction each, audited where it is a control operation.

The scheduler (:mod:`orbit_server.pulse.scheduler`) fires what is due; this service wakes the
node's scheduler when a change may make something due sooner.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from orbit_server.audit import Actor, AuditWriter
from orbit_server.clock import Clock, to_rfc3339
from orbit_server.errors import AlreadyExists, InvalidRequest, NotFound, StateConflict
from orbit_server.ids import new_id
from orbit_server.pulse.fire_times import InvalidTiming, Timing, check_instant
from orbit_server.pulse.model import Owner
from orbit_server.pulse.schedule_model import Backfill, BackfillState, FireEntry, Schedule
from orbit_server.pulse.schedules import (
    Catchup,
    Cause,
    Definition,
    Outcome,
    Overlap,
    TimingSpec,
    backfill_count,
    backfill_range,
    due_at,
    first_slot,
    max_time,
    preview,
    task_spec,
)
from orbit_server.pulse.service import TaskService
from orbit_server.scope import Scope
from orbit_server.store import Database, DuplicateKey, Tx
from orbit_server.store import schedules as sstore
from orbit_server.store.schedules import Position

RECENT = 10
MAX_PREVIEW = 100
# Fields of a definition whose change plans the next fire anew (from now).
TIMING_FIELDS = frozenset({"cron", "timezone", "interval_ms", "start_at", "end_at"})
CHANGEABLE = TIMING_FIELDS | {"task", "catchup", "catchup_max", "overlap"}


@dataclass(frozen=True, slots=True)
class ScheduleView:
    schedule: Schedule
    recent: list[FireEntry]
    preview: list[datetime] | None = None


def definition_of(s: Schedule) -> Definition:
    return Definition(
        timing=TimingSpec(s.cron, s.timezone, s.interval_ms),
        task=s.task,
        catchup=Catchup(s.catchup),
        catchup_max=s.catchup_max,
        overlap=Overlap(s.overlap),
        start_at=s.start_at,
        end_at=s.end_at,
    )


def compiled(definition: Definition, created_at: datetime, *, given: bool = False) -> Timing:
    """The definition's timing; ``given``: a definition a caller gives (not one stored), whose
    times must be within the range of fire times."""
    try:
        if given:
            definition.check_times()
        return definition.check(created_at)
    except (InvalidTiming, ValueError) as exc:
        raise InvalidRequest(str(exc)) from None


class ScheduleService:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        audit: AuditWriter,
        tasks: TaskService,
        *,
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        self._db = db
        self._clock = clock
        self._audit = audit
        self._tasks = tasks
        self.wake = wake  # the node's scheduler looks again (set once it runs)

    # -- create, read -----------------------------------------------------------------------

    async def create(
        self, scope: Scope, name: str, definition: Definition, *, paused: bool, actor: Actor
    ) -> tuple[Schedule, bool]:
        """The new schedule and True; the existing one and False when a schedule of that name
        has the same definition; ``409 already_exists`` when its definition differs."""
        now = self._clock.now()
        timing = compiled(definition, now, given=True)
        nxt = first_slot(timing, now, definition.start_at, definition.end_at)
        record = Schedule(
            id=new_id("sch_"), scope=scope, name=name, version=1,
            cron=definition.timing.cron, timezone=definition.timing.timezone,
            interval_ms=definition.timing.interval_ms, task=definition.task,
            catchup=str(definition.catchup), catchup_max=definition.catchup_max,
            overlap=str(definition.overlap), start_at=definition.start_at,
            end_at=definition.end_at, paused=paused, paused_reason=None, next_fire_at=nxt,
            due_at=nxt, last_fire_at=None, last_task_id=None, queued_fire_at=None,
            created_at=now, updated_at=now,
        )  # fmt: skip

        async def unit(tx: Tx) -> tuple[Schedule, bool]:
            existing = await sstore.schedule_get(tx, scope, name)
            if existing is None:
                try:
                    await sstore.schedule_insert(tx, record)
                except DuplicateKey:
                    existing = await sstore.schedule_get(tx, scope, name)
                    if existing is None:
                        raise
                else:
                    await self._audit.record(
                        tx, scope=scope, actor=actor, action="schedule.create",
                        target_kind="schedule", target_id=name,
                        details={"id": record.id, **_described(definition), "paused": paused},
                    )  # fmt: skip
                    return record, True
            if definition_of(existing) != definition:  # paused or not is state, not definition
                raise AlreadyExists(
                    f"schedule {name} exists with a different definition; change it with "
                    "PATCH or choose another name"
                )
            return existing, False

        answer = await self._db.run(unit)
        if answer[1]:
            self.wake()
        return answer

    async def get(self, scope: Scope, name: str, *, preview_count: int = 0) -> ScheduleView:
        async def unit(tx: Tx) -> ScheduleView:
            schedule = await self._find(tx, scope, name)
            recent = await sstore.fires_newest(tx, schedule.id, before=None, limit=RECENT)
            return ScheduleView(schedule, recent)

        view = await self._db.read(unit)
        if preview_count:
            if not 1 <= preview_count <= MAX_PREVIEW:
                raise InvalidRequest(f"preview must be between 1 and {MAX_PREVIEW}")
            s = view.schedule
            timing = compiled(definition_of(s), s.created_at)
            times = preview(timing, self._clock.now(), s.start_at, s.end_at, preview_count)
            view = dataclasses.replace(view, preview=times)
        return view

    async def list_schedules(
        self, scope: Scope, *, after: str | None, limit: int
    ) -> list[ScheduleView]:
        async def unit(tx: Tx) -> list[ScheduleView]:
            found = await sstore.schedules_list(tx, scope, after=after, limit=limit)
            recent = await sstore.fires_newest_of(tx, [s.id for s in found], limit=RECENT)
            return [ScheduleView(s, recent[s.id]) for s in found]

        return await self._db.read(unit)

    async def fires(
        self, scope: Scope, name: str, *, before: datetime | None, limit: int
    ) -> list[FireEntry]:
        """The ledger of a schedule, newest first."""

        async def unit(tx: Tx) -> list[FireEntry]:
            schedule = await self._find(tx, scope, name)
            return await sstore.fires_newest(tx, schedule.id, before=before, limit=limit)

        return await self._db.read(unit)

    # -- change -------------------------------------------------------------------------------

    async def update(
        self,
        scope: Scope,
        name: str,
        changes: dict[str, Any],
        *,
        expected_version: int | None,
        actor: Actor,
    ) -> Schedule:
        """Apply ``changes`` (fields of a definition) as a new version, audited with the
        fields' values before and after. Giving ``cron`` clears ``interval_ms`` and the reverse.
        A change of timing or bounds plans the next fire from now."""
        unknown = set(changes) - CHANGEABLE
        if unknown:
            raise InvalidRequest(f"these fields cannot be changed: {', '.join(sorted(unknown))}")

        async def unit(tx: Tx) -> Schedule:
            s = await self._find(tx, scope, name, lock=True)
            now = self._clock.now()  # read under the lock: no pass of the schedule runs now
            if expected_version is not None and s.version != expected_version:
                raise StateConflict(
                    f"schedule {name} is at version {s.version}, not {expected_version}; "
                    "read it and try again"
                )
            before = definition_of(s)
            timing = before.timing
            if "cron" in changes and changes["cron"] is not None:
                timing = TimingSpec(changes["cron"], timing.timezone, None)
            if "interval_ms" in changes and changes["interval_ms"] is not None:
                if "cron" in changes and changes["cron"] is not None:
                    raise InvalidRequest("give cron or interval_ms, not both")
                timing = TimingSpec(None, timing.timezone, changes["interval_ms"])
            if "timezone" in changes:
                timing = dataclasses.replace(timing, timezone=changes["timezone"])
            rest = {
                k: v for k, v in changes.items() if k not in ("cron", "timezone", "interval_ms")
            }
            after = dataclasses.replace(before, timing=timing, **rest)
            new_timing = compiled(after, s.created_at, given=True)
            old, new = _described(before), _described(after)
            changed = {
                field: {"from": old[field], "to": value}
                for field, value in new.items()
                if old[field] != value
            }
            if not changed:
                return s
            replan = bool(TIMING_FIELDS & set(changed))
            nxt = s.next_fire_at
            if replan:  # from now, and after every slot the ledger has (a node's clock may lag)
                decided = await sstore.fires_last_planned(tx, s.id)
                nxt = first_slot(new_timing, max_time(now, decided), after.start_at, after.end_at)
            updated = dataclasses.replace(
                s, version=s.version + 1, cron=after.timing.cron,
                timezone=after.timing.timezone, interval_ms=after.timing.interval_ms,
                task=after.task, catchup=str(after.catchup), catchup_max=after.catchup_max,
                overlap=str(after.overlap), start_at=after.start_at, end_at=after.end_at,
                next_fire_at=nxt, due_at=due_at(nxt, s.queued_fire_at, now) if replan else s.due_at,
                updated_at=now,
            )  # fmt: skip
            await sstore.schedule_update(tx, updated)
            await self._audit.record(
                tx, scope=scope, actor=actor, action="schedule.update", target_kind="schedule",
                target_id=name, details={"version": updated.version, "changes": changed},
            )  # fmt: skip
            return updated

        record = await self._db.run(unit)
        self.wake()
        return record

    async def pause(self, scope: Scope, name: str, *, reason: str | None, actor: Actor) -> Schedule:
        return await self._set_paused(scope, name, True, reason, actor)

    async def resume(self, scope: Scope, name: str, *, actor: Actor) -> Schedule:
        return await self._set_paused(scope, name, False, None, actor)

    async def _set_paused(
        self, scope: Scope, name: str, paused: bool, reason: str | None, actor: Actor
    ) -> Schedule:
        async def unit(tx: Tx) -> Schedule:
            s = await self._find(tx, scope, name, lock=True)
            if s.paused == paused:
                return s
            now = self._clock.now()
            updated = dataclasses.replace(
                s, paused=paused, paused_reason=reason if paused else None, updated_at=now,
                # Resumed: a slot queued while paused is looked at again at once.
                due_at=s.due_at if paused else due_at(s.next_fire_at, s.queued_fire_at, now),
            )  # fmt: skip
            await sstore.schedule_update(tx, updated)
            await self._audit.record(
                tx, scope=scope, actor=actor, target_kind="schedule", target_id=name,
                action="schedule.pause" if paused else "schedule.resume",
                details={"reason": reason} if paused else {},
            )  # fmt: skip
            return updated

        record = await self._db.run(unit)
        self.wake()
        return record

    async def delete(self, scope: Scope, name: str, *, actor: Actor) -> None:
        """The schedule goes; its ledger stays for history; its running backfills stop."""

        async def unit(tx: Tx) -> None:
            s = await self._find(tx, scope, name, lock=True)
            await sstore.schedule_delete(tx, s.id)  # its backfills stop at their next step
            if s.queued_fire_at is not None:  # the slot that waited will not fire
                await sstore.fire_update(tx, FireEntry(
                    schedule_id=s.id, fire_at=s.queued_fire_at, planned=True, scope=scope,
                    schedule=s.name, outcome=str(Outcome.SKIPPED), cause=str(Cause.SCHEDULE),
                    task_id=None, recorded_at=self._clock.now(),
                ))  # fmt: skip
            await self._audit.record(
                tx, scope=scope, actor=actor, action="schedule.delete", target_kind="schedule",
                target_id=name, details={"id": s.id, "version": s.version},
            )  # fmt: skip

        await self._db.run(unit)

    # -- fire now, backfill -------------------------------------------------------------------

    async def trigger(self, scope: Scope, name: str, *, actor: Actor) -> FireEntry:
        """Fire now, whatever the overlap policy and even while paused; the fire counts as the
        schedule's latest for later overlap decisions."""

        async def unit(tx: Tx) -> FireEntry:
            s = await self._find(tx, scope, name, lock=True)
            now = self._clock.now()
            task = self._tasks.build(scope, [task_spec(s.task, Owner("schedule", s.id))], now)
            await self._tasks.create_in(tx, scope, task, now)
            fire = FireEntry(
                schedule_id=s.id, fire_at=now, planned=False, scope=scope, schedule=s.name,
                outcome=str(Outcome.FIRED), cause=str(Cause.TRIGGER), task_id=task[0].id,
                recorded_at=now,
            )  # fmt: skip
            await sstore.fires_insert(tx, [fire])
            stays = Position(
                s.id, s.next_fire_at, s.due_at, now, task[0].id, s.queued_fire_at, s.failure
            )
            await sstore.schedules_advance(tx, [stays], now)
            await self._audit.record(
                tx, scope=scope, actor=actor, action="schedule.trigger", target_kind="schedule",
                target_id=name, details={"task_id": task[0].id},
            )  # fmt: skip
            return fire

        return await self._db.run(unit)

    async def backfill(
        self,
        scope: Scope,
        name: str,
        start: datetime,
        end: datetime,
        *,
        actor: Actor,
        max_slots: int = 10_000,  # ORBIT_SCHEDULE_BACKFILL_MAX_SLOTS
        admit: Callable[[int], None] = lambda slots: None,
    ) -> Backfill:
        """Ask the scheduler to fire every slot in ``[start, end)`` that has no task yet, in
        budgeted passes; slots with a task are left alone, so repeating it is harmless.

        A range of more than ``max_slots`` slots is refused with the count; ``admit`` is
        given the count before anything is written (the submit limits: it raises to refuse).
        """
        now = self._clock.now()
        for field, moment in (("from", start), ("to", end)):
            try:
                check_instant(f"a backfill's {field}", moment)
            except InvalidTiming as exc:
                raise InvalidRequest(str(exc), details={"field": field}) from None
        if end <= start:
            raise InvalidRequest("a backfill's to must be after its from")
        if end > now:
            raise InvalidRequest("a backfill covers past time only: to must not be in the future")

        async def read(tx: Tx) -> Schedule:
            return await self._find(tx, scope, name)

        s = await self._db.read(read)
        first, last = backfill_range(
            start, end, start_at=s.start_at, end_at=s.end_at, next_fire_at=s.next_fire_at
        )
        timing = compiled(definition_of(s), s.created_at)
        slots, exact = await asyncio.to_thread(
            backfill_count, timing, first, last, limit=max_slots
        )  # a walk of up to max_slots cron slots: off the event loop
        if slots > max_slots:
            holds = f"{slots} slots" if exact else f"more than {max_slots} slots"
            raise InvalidRequest(
                f"the range holds {holds}; a backfill covers at most {max_slots}: "
                "split it into shorter ranges",
                details={"slots": slots, "exact": exact, "max_slots": max_slots},
            )
        admit(slots)

        async def unit(tx: Tx) -> Backfill:
            s = await self._find(tx, scope, name, lock=True)
            record = Backfill(
                id=new_id("bkf_"), schedule_id=s.id, scope=scope, schedule=s.name,
                from_at=start, to_at=end, cursor_at=None, state=BackfillState.RUNNING, fired=0,
                existing=0, created_at=now, finished_at=None,
            )  # fmt: skip
            await sstore.backfill_insert(tx, record)
            await self._audit.record(
                tx, scope=scope, actor=actor, action="schedule.backfill", target_kind="schedule",
                target_id=name,
                details={"backfill": record.id, "from": to_rfc3339(start), "to": to_rfc3339(end)},
            )  # fmt: skip
            return record

        record = await self._db.run(unit)
        self.wake()
        return record

    async def backfills(self, scope: Scope, name: str, *, limit: int) -> list[Backfill]:
        async def unit(tx: Tx) -> list[Backfill]:
            s = await self._find(tx, scope, name)
            return await sstore.backfills_of(tx, s.id, limit=limit)

        return await self._db.read(unit)

    async def backfill_status(self, scope: Scope, name: str, backfill_id: str) -> Backfill:
        async def unit(tx: Tx) -> Backfill | None:
            s = await self._find(tx, scope, name)
            return await sstore.backfill_get(tx, s.id, backfill_id)

        found = await self._db.read(unit)
        if found is None:
            raise NotFound("no such backfill")
        return found

    async def prune_fires(self, retention_ms: int, *, budget: int = 1000) -> int:
        """Forget ledger rows recorded longer than ``retention_ms`` ago, at most ``budget``."""
        before = self._clock.now() - timedelta(milliseconds=retention_ms)

        async def unit(tx: Tx) -> int:
            return await sstore.fires_prune(tx, before, limit=budget)

        return await self._db.run(unit)

    # -- helpers ------------------------------------------------------------------------------

    @staticmethod
    async def _find(tx: Tx, scope: Scope, name: str, *, lock: bool = False) -> Schedule:
        found = await sstore.schedule_get(tx, scope, name, lock=lock)
        if found is None:
            raise NotFound("no such schedule")
        return found


def _described(d: Definition) -> dict[str, Any]:
    """A definition as the audit log records it."""
    return {
        "cron": d.timing.cron,
        "timezone": d.timing.timezone,
        "interval_ms": d.timing.interval_ms,
        "task": d.task,
        "catchup": str(d.catchup),
        "catchup_max": d.catchup_max,
        "overlap": str(d.overlap),
        "start_at": to_rfc3339(d.start_at),
        "end_at": to_rfc3339(d.end_at),
    }
