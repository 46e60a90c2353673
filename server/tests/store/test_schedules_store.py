"""Conformance: the schedules' store methods (schedules, their fire ledger, backfills), on
every dialect."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.pulse.schedule_model import Backfill, FireEntry, Schedule
from orbit_server.store import Database, Tx
from orbit_server.store import schedules as schedule_store
from orbit_server.store.base import DuplicateKey
from orbit_server.store.schedules import Position
from tests.store.builders import OTHER, SCOPE

HOUR = timedelta(hours=1)


def schedule(at: datetime, schedule_id: str, name: str, due: datetime | None) -> Schedule:
    return Schedule(
        id=schedule_id, scope=SCOPE, name=name, version=1, cron=None, timezone="UTC",
        interval_ms=3_600_000, task={"queue": "emails", "type": "send"}, catchup="latest",
        catchup_max=10, overlap="allow", start_at=None, end_at=None, paused=False,
        paused_reason=None, next_fire_at=due, due_at=due, last_fire_at=None, last_task_id=None,
        queued_fire_at=None, created_at=at, updated_at=at,
    )  # fmt: skip


def fire(at: datetime, schedule_id: str, outcome: str = "fired", planned: bool = True) -> FireEntry:
    return FireEntry(
        schedule_id=schedule_id, fire_at=at, planned=planned, scope=SCOPE, schedule="name",
        outcome=outcome, cause="timing", task_id=f"t_{at:%H}" if outcome == "fired" else None,
        recorded_at=at,
    )  # fmt: skip


@pytest.mark.covers(
    "schedule_insert", "schedule_get", "schedule_lock_by_id", "schedules_list", "schedule_update",
    "schedule_delete", "schedules_due_lock", "schedules_advance", "schedules_due_times",
)  # fmt: skip
async def test_schedules_come_due_advance_change_and_go(db: Database, clock: FakeClock) -> None:
    now = clock.now()
    rows = [schedule(now, "sch_a", "hourly", now + HOUR), schedule(now, "sch_b", "daily", now),
            schedule(now, "sch_c", "idle", None)]  # fmt: skip

    async def create(tx: Tx) -> None:
        for row in rows:
            await schedule_store.schedule_insert(tx, row)

    await db.run(create)
    with pytest.raises(DuplicateKey):
        await db.run(lambda tx: schedule_store.schedule_insert(tx, dataclasses.replace(
            rows[0], id="sch_x")))  # fmt: skip

    async def names(tx: Tx, after: str | None, limit: int) -> list[str]:
        found = await schedule_store.schedules_list(tx, SCOPE, after=after, limit=limit)
        return [s.name for s in found]

    async def read(tx: Tx) -> tuple[object, ...]:
        return (
            await schedule_store.schedule_get(tx, SCOPE, "hourly"),
            await schedule_store.schedule_get(tx, SCOPE, "hourly", lock=True),
            await schedule_store.schedule_get(tx, OTHER, "hourly"),
            await schedule_store.schedule_lock_by_id(tx, "sch_b"),
            await schedule_store.schedule_lock_by_id(tx, "none"),
            await names(tx, None, 2),
            await names(tx, "hourly", 5),
            await schedule_store.schedules_due_times(tx, limit=5),
        )

    assert await db.read(read) == (
        rows[0], rows[0], None, rows[1], None, ["daily", "hourly"], ["idle"], [now, now + HOUR],
    )  # fmt: skip

    async def due(tx: Tx) -> list[Schedule]:
        return await schedule_store.schedules_due_lock(tx, now + HOUR, limit=5)

    assert [s.id for s in await db.run(due)] == ["sch_b", "sch_a"]  # the oldest due first
    fired = now + timedelta(minutes=1)
    moves = [Position("sch_b", now + 24 * HOUR, now + 24 * HOUR, now, "t_1", None),
             Position("sch_a", None, None, None, None, now, failure="no such queue")]  # fmt: skip

    async def advance(tx: Tx) -> None:
        await schedule_store.schedules_advance(tx, moves, fired)
        await schedule_store.schedules_advance(tx, [], fired)

    await db.run(advance)

    async def both(tx: Tx) -> tuple[Schedule | None, Schedule | None]:
        return (
            await schedule_store.schedule_lock_by_id(tx, "sch_b"),
            await schedule_store.schedule_lock_by_id(tx, "sch_a"),
        )

    b, a = await db.read(both)
    assert b is not None and (b.due_at, b.last_fire_at, b.last_task_id) == (
        now + 24 * HOUR, now, "t_1",
    )  # fmt: skip
    assert a is not None and (a.due_at, a.queued_fire_at, a.failure) == (None, now, "no such queue")
    assert await db.read(lambda tx: schedule_store.schedules_due_times(tx, limit=5)) == [
        now + 24 * HOUR
    ]
    changed = dataclasses.replace(rows[2], version=2, paused=True, paused_reason="holiday",
                                  cron="0 * * * *", interval_ms=None, updated_at=fired)  # fmt: skip
    await db.run(lambda tx: schedule_store.schedule_update(tx, changed))
    assert await db.read(lambda tx: schedule_store.schedule_get(tx, SCOPE, "idle")) == changed

    async def delete(tx: Tx) -> list[bool]:
        return [await schedule_store.schedule_delete(tx, "sch_c") for _ in "ab"]

    assert await db.run(delete) == [True, False]


@pytest.mark.covers(
    "fires_insert", "fire_update", "fires_newest", "fires_newest_of", "fires_last_planned",
    "fires_between", "fires_prune",
)  # fmt: skip
async def test_the_fire_ledger_keeps_one_row_per_slot(db: Database, clock: FakeClock) -> None:
    start = clock.now()
    slots = [start + i * HOUR for i in range(4)]
    ledger = [fire(slots[0], "s1"), fire(slots[1], "s1", "skipped"), fire(slots[2], "s1", "queued"),
              fire(slots[2], "s1", planned=False), fire(slots[0], "s2")]  # fmt: skip
    await db.run(lambda tx: schedule_store.fires_insert(tx, ledger))
    with pytest.raises(DuplicateKey):
        await db.run(lambda tx: schedule_store.fires_insert(tx, [fire(slots[1], "s1")]))

    async def read(tx: Tx) -> tuple[object, ...]:
        newest = await schedule_store.fires_newest(tx, "s1", before=None, limit=10)
        return (
            [(f.fire_at, f.planned) for f in newest],
            await schedule_store.fires_newest(tx, "s1", before=slots[2], limit=1),
            {k: len(v) for k, v in (await schedule_store.fires_newest_of(
                tx, ["s1", "s2", "s3"], limit=2)).items()},
            await schedule_store.fires_last_planned(tx, "s1"),
            await schedule_store.fires_last_planned(tx, "s3"),
            sorted(await schedule_store.fires_between(tx, "s1", slots[1], slots[3])),
        )  # fmt: skip

    assert await db.read(read) == (
        [(slots[2], True), (slots[2], False), (slots[1], True), (slots[0], True)],
        [ledger[1]], {"s1": 2, "s2": 1, "s3": 0}, slots[2], None, [slots[1], slots[2]],
    )  # fmt: skip
    later = clock.advance(3 * HOUR)
    decided = dataclasses.replace(ledger[2], outcome="fired", task_id="t_q", recorded_at=later)
    unknown = fire(slots[3], "s1")

    async def update(tx: Tx) -> list[bool]:
        return [await schedule_store.fire_update(tx, decided),
                await schedule_store.fire_update(tx, unknown)]  # fmt: skip

    assert await db.run(update) == [True, False]
    between = await db.read(lambda tx: schedule_store.fires_between(tx, "s1", slots[2], slots[2]))
    assert between == {slots[2]: decided}

    async def prune(tx: Tx) -> list[int]:
        return [await schedule_store.fires_prune(tx, later, limit=2) for _ in "abc"]

    # The four rows recorded before ``later`` go; the decided slot was recorded at it.
    assert await db.run(prune) == [2, 2, 0]
    assert await db.read(
        lambda tx: schedule_store.fires_newest(tx, "s1", before=None, limit=9)
    ) == [decided]


@pytest.mark.covers(
    "backfill_insert", "backfill_get", "backfills_of", "backfill_update", "backfills_running_lock",
)  # fmt: skip
async def test_backfills_run_oldest_first_until_they_end(db: Database, clock: FakeClock) -> None:
    start = clock.now()

    def backfill(backfill_id: str, schedule_id: str) -> Backfill:
        created = clock.advance(timedelta(seconds=1))
        return Backfill(
            id=backfill_id, schedule_id=schedule_id, scope=SCOPE, schedule="hourly",
            from_at=start - 24 * HOUR, to_at=start, cursor_at=None, state="running", fired=0,
            existing=0, created_at=created, finished_at=None,
        )  # fmt: skip

    rows = [backfill("bf_1", "s1"), backfill("bf_2", "s2"), backfill("bf_3", "s1")]

    async def create(tx: Tx) -> None:
        for row in rows:
            await schedule_store.backfill_insert(tx, row)

    await db.run(create)

    async def read(tx: Tx) -> tuple[object, ...]:
        return (
            await schedule_store.backfill_get(tx, "s1", "bf_1"),
            await schedule_store.backfill_get(tx, "s2", "bf_1"),  # not that schedule's
            [b.id for b in await schedule_store.backfills_of(tx, "s1", limit=5)],
            [b.id for b in await schedule_store.backfills_running_lock(tx, limit=2)],
        )

    assert await db.run(read) == (rows[0], None, ["bf_3", "bf_1"], ["bf_1", "bf_2"])
    done = dataclasses.replace(rows[0], cursor_at=start, state="done", fired=20, existing=4,
                               finished_at=clock.now())  # fmt: skip
    failed = dataclasses.replace(rows[1], state="failed", failure="the schedule was deleted",
                                 finished_at=clock.now())  # fmt: skip

    async def update(tx: Tx) -> list[str]:
        await schedule_store.backfill_update(tx, done)
        await schedule_store.backfill_update(tx, failed)
        return [b.id for b in await schedule_store.backfills_running_lock(tx, limit=5)]

    assert await db.run(update) == ["bf_3"]
    assert await db.read(lambda tx: schedule_store.backfill_get(tx, "s1", "bf_1")) == done
    assert await db.read(lambda tx: schedule_store.backfill_get(tx, "s2", "bf_2")) == failed
