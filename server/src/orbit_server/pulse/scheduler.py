"""The scheduler role (SPEC P9): passes that fire what is due and run backfills, on every node.

A pass locks up to ``batch`` due schedules through the index of their due time (on
MySQL/MariaDB passing over rows another node's pass holds), decides every due slot with
:func:`~orbit_server.pulse.schedules.plan_pass`, and writes in one transaction the ledger
rows, the tasks of the slots that fire and the schedules' new positions. A slot's ledger row
is unique per (schedule, fire time): with the schedule's lock it is why a slot fires at most
once across nodes and restarts, and it is written with the slot's task or not at all.

Between passes the node waits for the earliest due time it knows of: a small in-memory index
read from the schedules' due index after every pass, never trusted beyond ``refresh_s`` and
rebuilt from the database after a restart.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import structlog

from orbit_server.clock import Clock
from orbit_server.errors import QueueFull
from orbit_server.pulse.fire_times import InvalidTiming, Timing
from orbit_server.pulse.model import Owner
from orbit_server.pulse.schedule_service import definition_of
from orbit_server.pulse.schedules import (
    Catchup,
    Cause,
    Outcome,
    Overlap,
    PassInput,
    Plan,
    backfill_slots,
    min_time,
    plan_pass,
    task_spec,
)
from orbit_server.pulse.service import Submitted, TaskService
from orbit_server.pulse.states import TaskState
from orbit_server.scope import Scope
from orbit_server.store import Database, Tx
from orbit_server.store import pulse as store
from orbit_server.store import schedules as sstore
from orbit_server.store.admissions import AdmissionNote
from orbit_server.store.schedules import BackfillRecord, FireRecord, Position, ScheduleRecord

log = structlog.get_logger("orbit.scheduler")

TIMINGS_KEPT = 100_000
RETRY_FULL = timedelta(seconds=1)  # a schedule whose queue is full tries again this much later
UNSETTLED = (TaskState.SCHEDULED, TaskState.PENDING, TaskState.LEASED, TaskState.RUNNING)


@dataclass(slots=True)
class PassReport:
    """What one pass did: schedules (or backfills) handled, ledger outcomes, and the lag of
    each slot the pass fired (seconds from its fire time to the pass's commit)."""

    handled: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    lags: list[float] = field(default_factory=list)


@dataclass(slots=True)
class _Fire:
    """One slot that gets a task in this pass."""

    schedule: ScheduleRecord
    fire_at: datetime
    cause: Cause
    update: bool  # the slot has a ledger row already (queued, or missed and backfilled)
    task_id: str = ""


class Scheduler:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        tasks: TaskService,
        *,
        misfire_ms: int = 60_000,
        batch: int = 500,
        backfill_budget: int = 500,
        slots_per_schedule: int = 1000,
    ) -> None:
        self._db = db
        self._clock = clock
        self._tasks = tasks
        self._misfire = timedelta(milliseconds=misfire_ms)
        self.batch = batch
        self.backfill_budget = backfill_budget
        self._slots = slots_per_schedule
        self._timings: dict[tuple[str, int], Timing] = {}
        self.changed = asyncio.Event()  # a local change: look again before the next due time

    def wake(self) -> None:
        self.changed.set()

    def now(self) -> datetime:
        return self._clock.now()

    def _timing(self, s: ScheduleRecord) -> Timing:
        """The schedule's compiled timing; kept per version, as a version never changes."""
        key = (s.id, s.version)
        timing = self._timings.get(key)
        if timing is None:
            if len(self._timings) >= TIMINGS_KEPT:
                self._timings.clear()
            timing = self._timings[key] = definition_of(s).check(s.created_at)
        return timing

    # -- due schedules -------------------------------------------------------------------------

    async def run_due(self) -> PassReport:
        """One pass over up to ``batch`` due schedules. A queue at its ``max_pending`` makes
        the pass run again without the schedules that submit to it: they stay due, and try
        again a second later (their slots grow late, and the catch-up policy decides them
        if they grow too late)."""
        try:
            return await self._run_due(careful=False)
        except QueueFull:
            return await self._run_due(careful=True)

    async def _run_due(self, *, careful: bool) -> PassReport:
        report = PassReport()
        created: list[tuple[Scope, list[Submitted], list[AdmissionNote]]] = []

        fired_at: list[datetime] = []

        async def unit(tx: Tx) -> None:
            report.handled, report.outcomes = 0, Counter()
            created.clear()
            fired_at.clear()
            now = self._clock.now()
            schedules = await sstore.schedules_due_lock(tx, now, limit=self.batch)
            if not schedules:
                return
            watched = [t for s in schedules if (t := _watched(s)) is not None]
            running = set(await store.tasks_in_states(tx, watched, UNSETTLED)) if watched else set()
            plans: list[tuple[ScheduleRecord, Plan]] = []
            positions: list[Position] = []
            for s in schedules:
                try:
                    timing = self._timing(s)
                except (InvalidTiming, ValueError) as exc:  # e.g. a zone the system lost
                    log.error("schedule cannot be planned", schedule=s.name, reason=str(exc))
                    positions.append(_stay(s, None))
                    continue
                plan = plan_pass(
                    PassInput(
                        timing=timing, end_at=s.end_at, catchup=Catchup(s.catchup),
                        catchup_max=s.catchup_max, overlap=Overlap(s.overlap), paused=s.paused,
                        next_fire_at=s.next_fire_at, queued_fire_at=s.queued_fire_at,
                        previous_running=s.last_task_id in running,
                    ),
                    now, misfire=self._misfire, budget=self._slots,
                )  # fmt: skip
                plans.append((s, plan))
            if careful:
                full = await _full_queues(tx, plans)
                positions += [_stay(s, now + RETRY_FULL) for s, _ in plans if _queue(s) in full]
                plans = [(s, plan) for s, plan in plans if _queue(s) not in full]
            fires: list[FireRecord] = []
            firing: list[_Fire] = []
            for s, plan in plans:
                if plan.fire_queued is not None:
                    firing.append(_Fire(s, plan.fire_queued, Cause.SCHEDULE, update=True))
                for f in plan.fires:
                    report.outcomes[str(f.outcome)] += 1
                    if f.outcome == Outcome.FIRED:
                        firing.append(_Fire(s, f.fire_time, f.cause, update=False))
                    fires.append(_ledger(s, f.fire_time, f.outcome, f.cause, None, now))
                positions.append(_moved(s, plan))
            created.extend(await self._make_tasks(tx, firing, now))
            by_slot = {(f.schedule.id, f.fire_at): f.task_id for f in firing}
            fires = [replace(r, task_id=by_slot.get((r.schedule_id, r.fire_at))) for r in fires]
            await sstore.fires_insert(tx, fires)
            for slot in firing:
                if slot.update:
                    report.outcomes[str(Outcome.FIRED)] += 1
                    await sstore.fire_update(
                        tx,
                        _ledger(slot.schedule, slot.fire_at, Outcome.FIRED, slot.cause,
                                slot.task_id, now),
                    )  # fmt: skip
                fired_at.append(slot.fire_at)
            latest = {f.schedule.id: f for f in firing}  # in time order: the last one stays
            positions = [
                replace(p, last_fire_at=latest[p.id].fire_at, last_task_id=latest[p.id].task_id)
                if p.id in latest
                else p
                for p in positions
            ]
            await sstore.schedules_advance(tx, positions, now)
            report.handled = len(schedules)

        await self._db.run(unit)
        committed = self._clock.now()
        report.lags = [(committed - fire_at).total_seconds() for fire_at in fired_at]
        for scope, submitted, notes in created:
            await self._tasks.announce(scope, submitted, notes)
        return report

    async def _make_tasks(
        self, tx: Tx, firing: list[_Fire], now: datetime
    ) -> list[tuple[Scope, list[Submitted], list[AdmissionNote]]]:
        """The tasks of the slots that fire, one creation per scope; sets each slot's task."""
        per_scope: defaultdict[Scope, list[_Fire]] = defaultdict(list)
        for f in firing:
            per_scope[f.schedule.scope].append(f)
        created = []
        for scope in sorted(per_scope):
            group = per_scope[scope]
            specs = [task_spec(f.schedule.task, Owner("schedule", f.schedule.id)) for f in group]
            tasks = self._tasks.build(scope, specs, now)
            for f, task in zip(group, tasks, strict=True):
                f.task_id = task.id
            notes: list[AdmissionNote] = []
            submitted = await self._tasks.create_in(tx, scope, tasks, now, notes)
            created.append((scope, submitted, notes))
        return created

    # -- backfills -----------------------------------------------------------------------------

    async def run_backfills(self) -> PassReport:
        """One budgeted step of the oldest running backfill that no other node is stepping: up
        to ``backfill_budget`` slots from its cursor; slots with a task are left alone."""
        report = PassReport()
        created: list[tuple[Scope, list[Submitted], list[AdmissionNote]]] = []

        async def unit(tx: Tx) -> None:
            report.handled, report.outcomes, report.lags = 0, Counter(), []
            created.clear()
            now = self._clock.now()
            found = await sstore.backfills_running_lock(tx, limit=1)
            if not found:
                return
            backfill = found[0]
            report.handled = 1
            s = await sstore.schedule_get_by_id(tx, backfill.schedule_id)
            if s is None:
                await sstore.backfill_update(tx, _finished(backfill, "cancelled", now))
                return
            s = await sstore.schedule_get(tx, s.scope, s.name, lock=True) or s
            timing = self._timing(s)
            # Slots from the schedule's next fire on are the due passes' to decide.
            end = min_time(backfill.to_at, s.next_fire_at)
            slots = backfill_slots(
                timing, backfill.from_at, end, backfill.cursor_at, budget=self.backfill_budget
            )
            if not slots:
                await sstore.backfill_update(tx, _finished(backfill, "done", now))
                return
            known = await sstore.fires_between(tx, s.id, slots[0], slots[-1])
            firing = [
                _Fire(s, t, Cause.BACKFILL, update=t in known)
                for t in slots
                if t not in known or (known[t].task_id is None and known[t].outcome != "queued")
            ]
            created.extend(await self._make_tasks(tx, firing, now))
            await sstore.fires_insert(
                tx,
                [
                    _ledger(s, f.fire_at, Outcome.FIRED, f.cause, f.task_id, now)
                    for f in firing
                    if not f.update
                ],
            )
            for f in firing:
                if f.update:
                    await sstore.fire_update(
                        tx, _ledger(s, f.fire_at, Outcome.FIRED, f.cause, f.task_id, now)
                    )
            report.outcomes[str(Outcome.FIRED)] += len(firing)
            progressed = replace(
                backfill, cursor_at=slots[-1], fired=backfill.fired + len(firing),
                existing=backfill.existing + len(slots) - len(firing),
            )  # fmt: skip
            if len(slots) < self.backfill_budget:
                progressed = _finished(progressed, "done", now)
            await sstore.backfill_update(tx, progressed)

        await self._db.run(unit)
        for scope, submitted, notes in created:
            await self._tasks.announce(scope, submitted, notes)
        return report

    # -- the time index ------------------------------------------------------------------------

    async def next_due(self) -> datetime | None:
        """The earliest time any schedule is due (one read of the due index)."""

        async def unit(tx: Tx) -> list[datetime]:
            return await sstore.schedules_due_times(tx, limit=1)

        found = await self._db.read(unit)
        return found[0] if found else None


def _queue(s: ScheduleRecord) -> tuple[Scope, str]:
    return s.scope, str(s.task["queue"])


def _moved(s: ScheduleRecord, plan: Plan) -> Position:
    """Where the plan leaves the schedule (its latest fire is set once its tasks exist)."""
    return Position(s.id, plan.next_fire_at, plan.due_at, s.last_fire_at, s.last_task_id,
                    plan.queued_fire_at)  # fmt: skip


def _stay(s: ScheduleRecord, due_at: datetime | None) -> Position:
    """The schedule stays where it is, due again at ``due_at``."""
    return Position(s.id, s.next_fire_at, due_at, s.last_fire_at, s.last_task_id,
                    s.queued_fire_at)  # fmt: skip


async def _full_queues(tx: Tx, plans: list[tuple[ScheduleRecord, Plan]]) -> set[tuple[Scope, str]]:
    """The queues that cannot take the tasks the plans would submit to them now."""
    wanted: Counter[tuple[Scope, str]] = Counter()
    for s, plan in plans:
        wanted[_queue(s)] += len(plan.firing)
    full = set()
    for (scope, name), count in sorted(wanted.items()):
        queue = await store.queue_get(tx, scope, name) if count else None
        limit = None if queue is None else queue.max_pending
        if queue is not None and limit is not None and queue.pending + count > limit:
            full.add((scope, name))
    return full


def _watched(s: ScheduleRecord) -> str | None:
    """The task whose state the overlap policy needs, if any."""
    return None if s.overlap == Overlap.ALLOW else s.last_task_id


def _ledger(
    s: ScheduleRecord,
    fire_at: datetime,
    outcome: Outcome,
    cause: Cause,
    task_id: str | None,
    now: datetime,
) -> FireRecord:
    return FireRecord(
        schedule_id=s.id, fire_at=fire_at, planned=True, scope=s.scope, schedule=s.name,
        outcome=str(outcome), cause=str(cause), task_id=task_id, recorded_at=now,
    )  # fmt: skip


def _finished(backfill: BackfillRecord, state: str, now: datetime) -> BackfillRecord:
    return replace(backfill, state=state, finished_at=now)
