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

One schedule or backfill that cannot be fired fails alone: a schedule whose pass raises is
passed again by itself and, failing again, is set aside for ``RETRY_BROKEN`` with the reason
in its ``failure``; a backfill whose step raises ends ``failed`` with its reason. The others
go on, and no error of one of them stops the loop.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import structlog

from orbit_server.clock import Clock
from orbit_server.errors import QueueFull, TransientError
from orbit_server.pulse.fire_times import InvalidTiming, Timing
from orbit_server.pulse.model import Owner, Task
from orbit_server.pulse.schedule_model import Backfill, BackfillState, FireEntry, Schedule
from orbit_server.pulse.schedule_service import definition_of
from orbit_server.pulse.schedules import (
    Catchup,
    Cause,
    Outcome,
    Overlap,
    PassInput,
    Plan,
    backfill_range,
    backfill_slots,
    plan_pass,
    task_spec,
)
from orbit_server.pulse.service import Submitted, TaskService
from orbit_server.pulse.states import TaskState
from orbit_server.scope import Scope
from orbit_server.store import Database, DuplicateKey, Tx
from orbit_server.store import queues as queue_store
from orbit_server.store import schedules as sstore
from orbit_server.store import tasks as task_store
from orbit_server.store.schedules import Position

log = structlog.get_logger("orbit.scheduler")

TIMINGS_KEPT = 100_000
RETRY_FULL = timedelta(seconds=1)  # a schedule whose queue is full tries again this much later
RETRY_BROKEN = timedelta(minutes=1)  # a schedule whose timing cannot be read (zone data gone)
BACKFILL_CANDIDATES = 8  # running backfills a step looks at for one whose queue has room
UNSETTLED = (TaskState.SCHEDULED, TaskState.PENDING, TaskState.LEASED, TaskState.RUNNING)
# What a schedule's or a backfill's failure says when the cause is internal (it is logged with
# the schedule's name and id, never shown).
INTERNAL_FAILURE = (
    "the scheduler failed to fire it (an internal error; the server log has the cause)"
)


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

    schedule: Schedule
    fire_at: datetime
    cause: Cause
    update: bool  # the slot may have a ledger row already (queued, or recorded and backfilled)
    task_id: str = ""


class _StepFailed(Exception):
    """A backfill's step raised: that backfill fails, and the pass rolls back."""

    def __init__(self, backfill: Backfill) -> None:
        super().__init__(backfill.id)
        self.backfill = backfill


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
        backfill_max_slots: int = 10_000,
        slots_per_schedule: int = 1000,
    ) -> None:
        self._db = db
        self._clock = clock
        self._tasks = tasks
        self._misfire = timedelta(milliseconds=misfire_ms)
        self.batch = batch
        self.backfill_budget = backfill_budget
        self.backfill_max_slots = backfill_max_slots
        self._slots = slots_per_schedule
        self._timings: dict[tuple[str, int], Timing] = {}
        self.changed = asyncio.Event()  # a local change: look again before the next due time

    def wake(self) -> None:
        self.changed.set()

    def now(self) -> datetime:
        return self._clock.now()

    def _timing(self, s: Schedule) -> Timing:
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
        """One pass over up to ``batch`` due schedules.

        Should a queue be at its ``max_pending``, or a slot be in the ledger already (a
        schedule changed through a node whose clock is behind), the pass runs again carefully:
        it leaves out the slots the ledger has, and admits schedules into each limited queue
        in due order while there is room; the others stay due and try again a second later
        (their slots grow late, and the catch-up policy decides them if they grow too late).
        """
        try:
            try:
                return await self._run_due(careful=False, limit=self.batch)
            except (QueueFull, DuplicateKey):
                return await self._run_due(careful=True, limit=self.batch)
        except TransientError:
            raise
        except Exception:
            log.exception("scheduler pass failed; its schedules are passed one at a time")
            return await self._run_one_by_one()

    async def _run_one_by_one(self) -> PassReport:
        """Up to ``batch`` due schedules, each in a pass of its own: one that fails again is
        set aside with its failure, and the others fire."""
        total = PassReport()
        for _ in range(self.batch):
            seen: list[Schedule] = []
            try:
                report = await self._run_due(careful=True, limit=1, seen=seen)
            except TransientError:
                raise
            except Exception:
                if not seen:
                    raise
                log.exception("schedule cannot be fired; set aside", schedule=seen[0].name,
                              id=seen[0].id)  # fmt: skip
                await self._set_aside(seen[0].id, INTERNAL_FAILURE)
                total.handled += 1
                continue
            if not report.handled:
                break
            total.handled += report.handled
            total.outcomes.update(report.outcomes)
            total.lags += report.lags
        return total

    async def _set_aside(self, schedule_id: str, failure: str) -> None:
        """The schedule stays where it is, due again in ``RETRY_BROKEN``, with its failure."""

        async def unit(tx: Tx) -> None:
            s = await sstore.schedule_lock_by_id(tx, schedule_id)
            if s is not None:
                now = self._clock.now()
                await sstore.schedules_advance(tx, [_stay(s, now + RETRY_BROKEN, failure)], now)

        await self._db.run(unit)

    async def _run_due(
        self, *, careful: bool, limit: int, seen: list[Schedule] | None = None
    ) -> PassReport:

        async def unit(tx: Tx) -> tuple[PassReport, list[datetime]]:
            report = PassReport()
            fired_at: list[datetime] = []
            now = self._clock.now()
            schedules = await sstore.schedules_due_lock(tx, now, limit=limit)
            if seen is not None:
                seen[:] = schedules
            if not schedules:
                return report, fired_at
            watched = [t for s in schedules if (t := _watched(s)) is not None]
            running = (
                set(await task_store.tasks_in_states(tx, watched, UNSETTLED)) if watched else set()
            )
            plans: list[tuple[Schedule, Plan]] = []
            positions: list[Position] = []
            for s in schedules:
                try:
                    plan = self._plan(s, now, previous_running=s.last_task_id in running)
                except InvalidTiming as exc:  # e.g. a zone the system lost: says why
                    log.error("schedule cannot be planned", schedule=s.name, reason=str(exc))
                    positions.append(_stay(s, now + RETRY_BROKEN, str(exc)))
                    continue
                except Exception:
                    log.exception("schedule cannot be planned", schedule=s.name, id=s.id)
                    positions.append(_stay(s, now + RETRY_BROKEN, INTERNAL_FAILURE))
                    continue
                plans.append((s, plan))
            if careful:
                await _drop_recorded(tx, plans)
                held = await _held_back(tx, plans)
                positions += [
                    _stay(s, now + RETRY_FULL, s.failure) for s, _ in plans if s.id in held
                ]
                plans = [(s, plan) for s, plan in plans if s.id not in held]
            fires: list[FireEntry] = []
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
            built = self._build_tasks(firing, now)
            by_slot = {(f.schedule.id, f.fire_at): f.task_id for f in firing}
            fires = [replace(r, task_id=by_slot.get((r.schedule_id, r.fire_at))) for r in fires]
            # The ledger and the positions first: the tasks' creation takes the queues' rows,
            # which results and claims need, so it comes last (decision 0006).
            await sstore.fires_insert(tx, fires)
            for slot in firing:
                if slot.update:
                    report.outcomes[str(Outcome.FIRED)] += 1
                    await _record_fired(tx, slot, now)
                fired_at.append(slot.fire_at)
            latest = {f.schedule.id: f for f in firing}  # in time order: the last one stays
            positions = [
                replace(p, last_fire_at=latest[p.id].fire_at, last_task_id=latest[p.id].task_id)
                if p.id in latest
                else p
                for p in positions
            ]
            await sstore.schedules_advance(tx, positions, now)
            await self._create_tasks(tx, built, now)
            report.handled = len(schedules)
            return report, fired_at

        report, fired_at = await self._db.run(unit)
        committed = self._clock.now()
        report.lags = [(committed - fire_at).total_seconds() for fire_at in fired_at]
        return report

    def _plan(self, s: Schedule, now: datetime, *, previous_running: bool) -> Plan:
        return plan_pass(
            PassInput(
                timing=self._timing(s), end_at=s.end_at, catchup=Catchup(s.catchup),
                catchup_max=s.catchup_max, overlap=Overlap(s.overlap), paused=s.paused,
                next_fire_at=s.next_fire_at, queued_fire_at=s.queued_fire_at,
                previous_running=previous_running,
            ),
            now, misfire=self._misfire, budget=self._slots,
        )  # fmt: skip

    def _build_tasks(self, firing: list[_Fire], now: datetime) -> dict[Scope, list[Task]]:
        """The tasks of the slots that fire, per scope; sets each slot's task id."""
        per_scope: defaultdict[Scope, list[_Fire]] = defaultdict(list)
        for f in firing:
            per_scope[f.schedule.scope].append(f)
        built: dict[Scope, list[Task]] = {}
        for scope, group in per_scope.items():
            specs = [task_spec(f.schedule.task, Owner("schedule", f.schedule.id)) for f in group]
            built[scope] = self._tasks.build(scope, specs, now)
            for f, task in zip(group, built[scope], strict=True):
                f.task_id = task.id
        return built

    async def _create_tasks(
        self, tx: Tx, built: dict[Scope, list[Task]], now: datetime
    ) -> list[Submitted]:
        created: list[Submitted] = []
        for scope in sorted(built):  # one creation per scope, in a fixed order
            created += await self._tasks.create_in(tx, scope, built[scope], now)
        return created

    # -- backfills -----------------------------------------------------------------------------

    async def run_backfills(self) -> PassReport:
        """One budgeted step of a running backfill that no other node is stepping, the oldest
        whose queue has room: up to ``backfill_budget`` slots from its cursor (fewer when the
        queue has less room); slots with a task are left alone. ``handled`` is 0 when no
        backfill could take a step."""

        async def unit(tx: Tx) -> PassReport:
            report = PassReport()
            now = self._clock.now()
            for backfill in await sstore.backfills_running_lock(tx, limit=BACKFILL_CANDIDATES):
                try:
                    fired = await self._step(tx, backfill, now)
                except TransientError:
                    raise
                except Exception as exc:
                    raise _StepFailed(backfill) from exc
                if fired is not None:
                    report.handled = 1
                    report.outcomes[str(Outcome.FIRED)] += fired
                    break
            return report

        try:
            return await self._db.run(unit)
        except _StepFailed as exc:
            failed = exc.backfill
            log.error("backfill cannot be stepped; it fails", schedule=failed.schedule,
                      backfill=failed.id, exc_info=exc.__cause__)  # fmt: skip
            await self._fail_backfill(failed, INTERNAL_FAILURE)
            return PassReport(handled=1)

    async def _fail_backfill(self, failed: Backfill, failure: str) -> None:
        async def unit(tx: Tx) -> None:
            backfill = await sstore.backfill_get(tx, failed.schedule_id, failed.id)
            if backfill is not None and backfill.state == BackfillState.RUNNING:
                now = self._clock.now()
                await sstore.backfill_update(
                    tx, _finished(backfill, BackfillState.FAILED, now, failure)
                )

        await self._db.run(unit)

    async def _step(self, tx: Tx, backfill: Backfill, now: datetime) -> int | None:
        """One step of ``backfill``: how many slots it fired, or None when its queue has no
        room (nothing written)."""
        s = await sstore.schedule_lock_by_id(tx, backfill.schedule_id)
        if s is None:  # the schedule was deleted: its backfills end
            await sstore.backfill_update(tx, _finished(backfill, BackfillState.CANCELLED, now))
            return 0
        try:
            timing = self._timing(s)
        except InvalidTiming as exc:
            log.error("backfill cannot be planned", schedule=s.name, reason=str(exc))
            await sstore.backfill_update(
                tx, _finished(backfill, BackfillState.FAILED, now, str(exc))
            )
            return 0
        room = await _room(tx, s)
        budget = self.backfill_budget if room is None else min(self.backfill_budget, room)
        if budget <= 0:
            return None
        start, end = backfill_range(
            backfill.from_at, backfill.to_at, start_at=s.start_at, end_at=s.end_at,
            next_fire_at=s.next_fire_at,
        )  # fmt: skip
        # The range was counted when it was asked for; a timing changed since may hold more.
        left = self.backfill_max_slots - backfill.fired - backfill.existing
        if left < budget:
            beyond = backfill_slots(timing, start, end, backfill.cursor_at, budget=left + 1)
            if len(beyond) > left:
                failure = f"it reached the most slots a backfill covers ({self.backfill_max_slots})"
                log.warning("backfill stopped", schedule=s.name, backfill=backfill.id,
                            reason=failure)  # fmt: skip
                await sstore.backfill_update(
                    tx, _finished(backfill, BackfillState.FAILED, now, failure)
                )
                return 0
        slots = backfill_slots(timing, start, end, backfill.cursor_at, budget=budget)
        if not slots:
            await sstore.backfill_update(tx, _finished(backfill, BackfillState.DONE, now))
            return 0
        known = await sstore.fires_between(tx, s.id, slots[0], slots[-1])
        firing = [
            _Fire(s, t, Cause.BACKFILL, update=t in known)
            for t in slots
            if t not in known or (known[t].task_id is None and known[t].outcome != "queued")
        ]
        built = self._build_tasks(firing, now)
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
                await _record_fired(tx, f, now)
        progressed = replace(
            backfill, cursor_at=slots[-1], fired=backfill.fired + len(firing),
            existing=backfill.existing + len(slots) - len(firing),
        )  # fmt: skip
        if len(slots) < budget:
            progressed = _finished(progressed, BackfillState.DONE, now)
        await sstore.backfill_update(tx, progressed)
        await self._create_tasks(tx, built, now)
        return len(firing)

    # -- the time index ------------------------------------------------------------------------

    async def next_due(self) -> datetime | None:
        """The earliest time any schedule is due (one read of the due index)."""

        async def unit(tx: Tx) -> list[datetime]:
            return await sstore.schedules_due_times(tx, limit=1)

        found = await self._db.read(unit)
        return found[0] if found else None


def _queue(s: Schedule) -> tuple[Scope, str]:
    return s.scope, str(s.task["queue"])


def _moved(s: Schedule, plan: Plan) -> Position:
    """Where the plan leaves the schedule (its latest fire is set once its tasks exist)."""
    return Position(s.id, plan.next_fire_at, plan.due_at, s.last_fire_at, s.last_task_id,
                    plan.queued_fire_at)  # fmt: skip


def _stay(s: Schedule, due_at: datetime | None, failure: str | None) -> Position:
    """The schedule stays where it is, due again at ``due_at``."""
    return Position(s.id, s.next_fire_at, due_at, s.last_fire_at, s.last_task_id,
                    s.queued_fire_at, failure)  # fmt: skip


async def _room(tx: Tx, s: Schedule) -> int | None:
    """How many more tasks the schedule's queue takes now (None: no limit)."""
    scope, name = _queue(s)
    queue = await queue_store.queue_get(tx, scope, name)
    if queue is None or queue.max_pending is None:
        return None
    return max(0, queue.max_pending - queue.pending)


async def _drop_recorded(tx: Tx, plans: list[tuple[Schedule, Plan]]) -> None:
    """Leave out of the plans the slots the ledger has already: they were decided."""
    for s, plan in plans:
        if not plan.fires:
            continue
        known = await sstore.fires_between(tx, s.id, plan.fires[0].fire_time,
                                           plan.fires[-1].fire_time)  # fmt: skip
        if known:
            log.warning("schedule slots were decided already", schedule=s.name, slots=len(known))
            plan.fires = [f for f in plan.fires if f.fire_time not in known]
            if plan.queued_fire_at is not None and plan.queued_fire_at in known:
                plan.queued_fire_at = s.queued_fire_at if plan.fire_queued is None else None


async def _held_back(tx: Tx, plans: list[tuple[Schedule, Plan]]) -> set[str]:
    """The schedules whose tasks do not fit in their queue's room, taking the schedules in
    due order and each whole (the first ones that fit go)."""
    rooms: dict[tuple[Scope, str], int | None] = {}
    held: set[str] = set()
    for s, plan in plans:
        wanted = len(plan.firing)
        if not wanted:
            continue
        key = _queue(s)
        if key not in rooms:
            rooms[key] = await _room(tx, s)
        room = rooms[key]
        if room is None:
            continue
        if wanted > room:
            held.add(s.id)
        else:
            rooms[key] = room - wanted
    return held


async def _record_fired(tx: Tx, slot: _Fire, now: datetime) -> None:
    """The slot's ledger row becomes fired with its task; written anew if it is gone."""
    fired = _ledger(slot.schedule, slot.fire_at, Outcome.FIRED, slot.cause, slot.task_id, now)
    if not await sstore.fire_update(tx, fired):
        await sstore.fires_insert(tx, [fired])


def _watched(s: Schedule) -> str | None:
    """The task whose state the overlap policy needs, if any."""
    return None if s.overlap == Overlap.ALLOW else s.last_task_id


def _ledger(
    s: Schedule,
    fire_at: datetime,
    outcome: Outcome,
    cause: Cause,
    task_id: str | None,
    now: datetime,
) -> FireEntry:
    return FireEntry(
        schedule_id=s.id, fire_at=fire_at, planned=True, scope=s.scope, schedule=s.name,
        outcome=str(outcome), cause=str(cause), task_id=task_id, recorded_at=now,
    )  # fmt: skip


def _finished(
    backfill: Backfill, state: BackfillState, now: datetime, failure: str | None = None
) -> Backfill:
    return replace(backfill, state=state, finished_at=now, failure=failure)
