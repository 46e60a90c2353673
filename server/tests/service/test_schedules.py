"""Schedules on both dialects with a fake clock: each slot fires at most once, catch-up and
overlap policies, pause, trigger, backfill, changes and deletion (SPEC P9)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from orbit_server.audit import Actor
from orbit_server.bootstrap import build_node
from orbit_server.clock import FakeClock
from orbit_server.config import Settings
from orbit_server.errors import AlreadyExists, InvalidRequest, NotFound, StateConflict
from orbit_server.pulse.schedule_model import FireEntry
from orbit_server.pulse.scheduler import PassReport
from orbit_server.pulse.schedules import Catchup, Definition, Overlap, TimingSpec
from orbit_server.pulse.service import QueueSettings
from orbit_server.runtime.node import Node
from orbit_server.store import Database
from orbit_server.store import schedules as sstore
from tests.conftest import SCOPE

ACTOR = Actor("test")
START = datetime(2030, 1, 1, tzinfo=UTC)  # the fake clock's start
TEMPLATE: dict[str, Any] = {"queue": "reports", "type": "build", "params": {"n": 1}}


def every(
    seconds: int,
    *,
    catchup: Catchup = Catchup.LATEST,
    catchup_max: int = 10,
    overlap: Overlap = Overlap.ALLOW,
    start_at: datetime | None = None,
    end_at: datetime | None = None,
) -> Definition:
    return Definition(
        timing=TimingSpec(None, "UTC", seconds * 1000),
        task=TEMPLATE,
        catchup=catchup,
        catchup_max=catchup_max,
        overlap=overlap,
        start_at=start_at,
        end_at=end_at,
    )


async def create(node: Node, name: str, definition: Definition, *, paused: bool = False) -> str:
    record, created = await node.schedules.create(
        SCOPE, name, definition, paused=paused, actor=ACTOR
    )
    assert created
    return record.id


async def run(node: Node) -> PassReport:
    """Passes until nothing more is due now (as the scheduler's loop runs them)."""
    total = PassReport()
    while True:
        report = await node.scheduler.run_due()
        if not report.handled:
            return total
        total.handled += report.handled
        total.outcomes.update(report.outcomes)
        total.lags += report.lags


async def ledger(node: Node, name: str) -> list[FireEntry]:
    """The schedule's ledger, oldest first."""
    fires = await node.schedules.fires(SCOPE, name, before=None, limit=500)
    return fires[::-1]


def offsets(fires: list[FireEntry], outcome: str) -> list[float]:
    """Fire times of the outcome, as seconds after the clock's start."""
    return [(f.fire_at - START).total_seconds() for f in fires if f.outcome == outcome]


async def test_an_interval_schedule_fires_each_slot_once_with_its_task(
    node: Node, clock: FakeClock
) -> None:
    await create(node, "tick", every(1))
    view = await node.schedules.get(SCOPE, "tick")
    assert view.schedule.next_fire_at == START + timedelta(seconds=1)  # epoch-aligned
    assert await node.scheduler.next_due() == START + timedelta(seconds=1)
    assert (await run(node)).handled == 0  # nothing due yet
    for _ in range(5):
        clock.advance(1000)
        report = await run(node)
        assert report.handled == 1 and report.outcomes == {"fired": 1}
        assert report.lags == [0.0]
    assert (await run(node)).handled == 0  # the same instant again: nothing more
    fires = await ledger(node, "tick")
    assert offsets(fires, "fired") == [1, 2, 3, 4, 5]
    assert {f.cause for f in fires} == {"schedule"}
    tasks = [await node.tasks.get(SCOPE, f.task_id or "") for f in fires]
    assert {(t.queue, t.type, t.state) for t in tasks} == {("reports", "build", "pending")}
    assert tasks[0].params == {"n": 1}
    record = (await node.schedules.get(SCOPE, "tick")).schedule
    assert (tasks[0].owner_kind, tasks[0].owner_id) == ("schedule", record.id)
    assert record.last_fire_at == START + timedelta(seconds=5)
    assert record.last_task_id == tasks[-1].id
    assert record.next_fire_at == START + timedelta(seconds=6)


async def test_two_nodes_passing_at_once_fire_each_slot_once(
    node: Node, db: Database, settings: Settings, clock: FakeClock
) -> None:
    other = await build_node(settings, db=db, clock=clock)
    for i in range(30):
        await create(node, f"s{i}", every(1))
    for _ in range(3):
        clock.advance(1000)
        reports = [await node.scheduler.run_due(), await other.scheduler.run_due()]
        assert sum(r.handled for r in reports) == 30
    for i in range(30):
        assert offsets(await ledger(node, f"s{i}"), "fired") == [1, 2, 3]


@pytest.mark.parametrize(
    ("catchup", "fired", "caught_up"),
    [
        (Catchup.SKIP, [11], []),
        (Catchup.LATEST, [10, 11], [10]),
        (Catchup.ALL, [7, 8, 9, 10, 11], [7, 8, 9, 10]),
    ],
)
async def test_slots_missed_while_no_scheduler_ran_follow_the_catchup_policy(
    node: Node, clock: FakeClock, catchup: Catchup, fired: list[int], caught_up: list[int]
) -> None:
    await create(node, "tick", every(1, catchup=catchup, catchup_max=4))
    clock.advance(1000)
    await run(node)  # slot 1 fires on time
    clock.advance(10_500)  # every scheduler down for 10.5 s: slots 2-11 come due unseen
    report = await run(node)
    fires = await ledger(node, "tick")
    assert offsets(fires, "fired") == [1, *fired]
    assert [o for o in offsets(fires, "fired") if o > 1] == fired
    caught = [(f.fire_at - START).total_seconds() for f in fires if f.cause == "catchup"]
    assert caught == caught_up
    missed = sorted(set(range(2, 12)) - set(fired))
    assert offsets(fires, "missed") == missed
    assert report.outcomes["missed"] == len(missed)


async def test_a_slot_a_little_late_is_not_missed_and_one_long_late_is(
    node: Node, clock: FakeClock
) -> None:
    await create(node, "hourly", every(3600, catchup=Catchup.SKIP))
    clock.advance(timedelta(hours=1, milliseconds=900))  # a busy pass: 0.9 s late
    await run(node)
    clock.advance(timedelta(hours=1, seconds=59))  # 60 s late: still within the misfire limit
    await run(node)
    clock.advance(timedelta(hours=1, seconds=2))  # 61 s late: missed, though no later slot is due
    await run(node)
    fires = await ledger(node, "hourly")
    assert offsets(fires, "fired") == [3600, 7200]
    assert offsets(fires, "missed") == [10800]


async def test_overlap_skip_passes_over_slots_while_the_previous_task_runs(
    node: Node, clock: FakeClock
) -> None:
    await create(node, "tick", every(1, overlap=Overlap.SKIP))
    clock.advance(1000)
    await run(node)
    clock.advance(1000)
    await run(node)  # the first task is still pending: slot 2 is skipped
    [first] = [f for f in await ledger(node, "tick") if f.outcome == "fired"]
    await node.tasks.cancel(SCOPE, first.task_id or "", reason=None, actor=ACTOR)
    clock.advance(1000)
    await run(node)  # the previous task has settled: slot 3 fires
    fires = await ledger(node, "tick")
    assert [(f.outcome, f.task_id is not None) for f in fires] == [
        ("fired", True), ("skipped", False), ("fired", True),
    ]  # fmt: skip


async def test_overlap_allow_fires_whatever_runs(node: Node, clock: FakeClock) -> None:
    await create(node, "tick", every(1, overlap=Overlap.ALLOW))
    for _ in range(3):
        clock.advance(1000)
        await run(node)
    assert offsets(await ledger(node, "tick"), "fired") == [1, 2, 3]


async def test_overlap_queue_one_keeps_one_slot_until_the_previous_task_settles(
    node: Node, clock: FakeClock
) -> None:
    await create(node, "tick", every(1, overlap=Overlap.QUEUE_ONE))
    clock.advance(1000)
    await run(node)  # slot 1 fires
    clock.advance(1000)
    await run(node)  # slot 2 queued
    clock.advance(1000)
    await run(node)  # slot 3 skipped: one is queued already
    fires = await ledger(node, "tick")
    assert [f.outcome for f in fires] == ["fired", "queued", "skipped"]
    record = (await node.schedules.get(SCOPE, "tick")).schedule
    assert record.queued_fire_at == START + timedelta(seconds=2)
    await node.tasks.cancel(SCOPE, fires[0].task_id or "", reason=None, actor=ACTOR)
    clock.advance(1000)
    report = await run(node)  # the queued slot fires; slot 4 waits behind it, queued
    assert report.outcomes == {"fired": 1, "queued": 1}
    fires = await ledger(node, "tick")
    assert [f.outcome for f in fires] == ["fired", "fired", "skipped", "queued"]
    assert fires[1].task_id is not None and fires[1].task_id != fires[0].task_id
    record = (await node.schedules.get(SCOPE, "tick")).schedule
    assert record.queued_fire_at == START + timedelta(seconds=4)
    assert record.last_task_id == fires[1].task_id


async def test_catchup_fires_pass_the_overlap_policy_too(node: Node, clock: FakeClock) -> None:
    await create(node, "tick", every(1, catchup=Catchup.ALL, overlap=Overlap.SKIP))
    clock.advance(5500)
    await run(node)  # slots 1-4 missed and caught up, slot 5 on time: only the first fires
    fires = await ledger(node, "tick")
    assert [f.outcome for f in fires] == ["fired", "skipped", "skipped", "skipped", "skipped"]


async def test_a_paused_schedule_records_its_slots_as_paused_and_fires_after_resume(
    node: Node, clock: FakeClock
) -> None:
    await create(node, "tick", every(1))
    await node.schedules.pause(SCOPE, "tick", reason="maintenance", actor=ACTOR)
    for _ in range(2):
        clock.advance(1000)
        await run(node)
    await node.schedules.resume(SCOPE, "tick", actor=ACTOR)
    clock.advance(1000)
    await run(node)
    fires = await ledger(node, "tick")
    assert [f.outcome for f in fires] == ["paused", "paused", "fired"]
    assert [f.task_id is None for f in fires] == [True, True, False]


async def test_a_schedule_created_paused_fires_nothing(node: Node, clock: FakeClock) -> None:
    await create(node, "tick", every(1), paused=True)
    clock.advance(1000)
    report = await run(node)
    assert report.outcomes == {"paused": 1}


async def test_trigger_fires_now_even_while_paused_and_counts_for_overlap(
    node: Node, clock: FakeClock
) -> None:
    await create(node, "tick", every(60, overlap=Overlap.SKIP), paused=True)
    clock.advance(10_000)
    fire = await node.schedules.trigger(SCOPE, "tick", actor=ACTOR)
    assert (fire.fire_at, fire.planned, fire.cause, fire.outcome) == (
        START + timedelta(seconds=10), False, "trigger", "fired",
    )  # fmt: skip
    task = await node.tasks.get(SCOPE, fire.task_id or "")
    assert task.state == "pending"
    await node.schedules.resume(SCOPE, "tick", actor=ACTOR)
    clock.advance(50_000)
    await run(node)  # the triggered task still waits: the slot at 60 s is skipped
    fires = await ledger(node, "tick")
    assert [(f.cause, f.outcome) for f in fires] == [("trigger", "fired"), ("schedule", "skipped")]


async def test_start_and_end_bound_the_slots(node: Node, clock: FakeClock) -> None:
    start = START + timedelta(seconds=2, milliseconds=500)
    end = start + timedelta(seconds=2)
    await create(node, "tick", every(1, catchup=Catchup.SKIP, start_at=start, end_at=end))
    clock.advance(10_000)
    await run(node)
    fires = await ledger(node, "tick")
    assert (offsets(fires, "fired"), offsets(fires, "missed")) == ([4.5], [2.5, 3.5])
    record = (await node.schedules.get(SCOPE, "tick")).schedule
    assert record.next_fire_at is None and record.due_at is None


async def test_a_cron_schedule_fires_at_the_end_of_the_spring_gap(
    node: Node, clock: FakeClock
) -> None:
    clock.set(datetime(2030, 3, 30, 12, tzinfo=UTC))  # Berlin springs forward on 31 March
    definition = Definition(
        TimingSpec("30 2 * * *", "Europe/Berlin", None), TEMPLATE, overlap=Overlap.ALLOW
    )
    await create(node, "nightly", definition)
    view = await node.schedules.get(SCOPE, "nightly", preview_count=3)
    assert view.preview == [
        datetime(2030, 3, 31, 1, tzinfo=UTC),  # 03:00 CEST, the gap's end
        datetime(2030, 4, 1, 0, 30, tzinfo=UTC),  # 02:30 CEST
        datetime(2030, 4, 2, 0, 30, tzinfo=UTC),
    ]
    clock.set(datetime(2030, 3, 31, 1, 0, 0, 200_000, tzinfo=UTC))
    await run(node)
    clock.set(datetime(2030, 4, 1, 0, 30, 0, 200_000, tzinfo=UTC))
    await run(node)
    fires = await ledger(node, "nightly")
    assert [f.fire_at for f in fires if f.outcome == "fired"] == view.preview[:2]


async def test_a_backfill_fires_slots_without_a_task_in_budgeted_passes_once(
    node: Node, clock: FakeClock
) -> None:
    node.scheduler.backfill_budget = 300
    await create(node, "tick", every(1, catchup=Catchup.SKIP))
    clock.advance(1000)
    await run(node)  # slot 1 fired
    clock.advance(1_001_000)  # down for 1,001 s: slots 2..1,002 are due, all but the last missed
    await run(node)
    start, end = START + timedelta(seconds=1), START + timedelta(seconds=1001)  # slots 1..1,000
    backfill = await node.schedules.backfill(SCOPE, "tick", start, end, actor=ACTOR)
    steps = []
    while (report := await node.scheduler.run_backfills()).handled:
        steps.append(report.outcomes["fired"])
    assert steps == [299, 300, 300, 100]  # the budget bounds every step; slot 1 had a task
    done = await node.schedules.backfill_status(SCOPE, "tick", backfill.id)
    assert (done.state, done.fired, done.existing) == ("done", 999, 1)
    fires = await node.schedules.fires(SCOPE, "tick", before=None, limit=500)
    assert len(fires) == 500
    again = await node.schedules.backfill(SCOPE, "tick", start, end, actor=ACTOR)
    while (await node.scheduler.run_backfills()).handled:
        pass
    repeated = await node.schedules.backfill_status(SCOPE, "tick", again.id)
    assert (repeated.state, repeated.fired, repeated.existing) == ("done", 0, 1000)
    backfills = await node.schedules.backfills(SCOPE, "tick", limit=10)
    assert [b.id for b in backfills] == [again.id, backfill.id]
    tasks = [f.task_id for f in await node.schedules.fires(SCOPE, "tick", before=end, limit=500)]
    assert len(set(tasks)) == 500 and None not in tasks


async def test_a_backfill_refuses_the_future_and_an_empty_range(
    node: Node, clock: FakeClock
) -> None:
    await create(node, "tick", every(1))
    with pytest.raises(InvalidRequest, match="past"):
        await node.schedules.backfill(SCOPE, "tick", START, START + timedelta(1), actor=ACTOR)
    with pytest.raises(InvalidRequest, match="after"):
        await node.schedules.backfill(SCOPE, "tick", START, START, actor=ACTOR)


async def test_a_change_is_a_new_audited_version_and_replans_from_now(
    node: Node, clock: FakeClock
) -> None:
    await create(node, "tick", every(60))
    clock.advance(30_000)
    updated = await node.schedules.update(
        SCOPE, "tick", {"interval_ms": 10_000}, expected_version=1, actor=ACTOR
    )
    assert updated.version == 2
    assert updated.next_fire_at == START + timedelta(seconds=40)
    with pytest.raises(StateConflict):
        await node.schedules.update(
            SCOPE, "tick", {"catchup": Catchup.ALL}, expected_version=1, actor=ACTOR
        )
    same = await node.schedules.update(SCOPE, "tick", {"interval_ms": 10_000},
                                       expected_version=None, actor=ACTOR)  # fmt: skip
    assert same.version == 2  # nothing changed: no new version
    cron = await node.schedules.update(
        SCOPE, "tick", {"cron": "0 * * * *"}, expected_version=2, actor=ACTOR
    )
    assert (cron.cron, cron.interval_ms, cron.version) == ("0 * * * *", None, 3)
    assert cron.next_fire_at == START + timedelta(hours=1)
    entries = await node.audit.list(SCOPE, limit=10)
    changes = [e.details for e in entries if e.action == "schedule.update"]
    assert changes[0]["changes"]["cron"] == {"from": None, "to": "0 * * * *"}
    assert changes[1]["changes"]["interval_ms"] == {"from": 60_000, "to": 10_000}
    with pytest.raises(InvalidRequest, match="cron"):
        await node.schedules.update(
            SCOPE, "tick", {"cron": "61 * * * *"}, expected_version=None, actor=ACTOR
        )


async def test_delete_keeps_the_ledger_and_stops_backfills(
    node: Node, db: Database, clock: FakeClock
) -> None:
    schedule_id = await create(node, "tick", every(1))
    clock.advance(3000)
    await run(node)
    backfill = await node.schedules.backfill(SCOPE, "tick", START, clock.now(), actor=ACTOR)
    await node.schedules.delete(SCOPE, "tick", actor=ACTOR)
    with pytest.raises(NotFound):
        await node.schedules.get(SCOPE, "tick")
    assert await node.schedules.list_schedules(SCOPE, after=None, limit=10) == []
    assert (await node.scheduler.run_backfills()).handled == 1
    assert (await node.scheduler.run_backfills()).handled == 0
    kept = await db.read(lambda tx: sstore.fires_newest(tx, schedule_id, before=None, limit=10))
    assert len(kept) == 3
    stopped = await db.read(lambda tx: sstore.backfill_get(tx, schedule_id, backfill.id))
    assert stopped is not None and stopped.state == "cancelled"
    again, created = await node.schedules.create(SCOPE, "tick", every(1), paused=False,
                                                 actor=ACTOR)  # fmt: skip
    assert created and again.id != schedule_id


async def test_create_is_idempotent_for_the_same_definition_only(node: Node) -> None:
    first = await create(node, "tick", every(1))
    same, created = await node.schedules.create(SCOPE, "tick", every(1), paused=False,
                                                actor=ACTOR)  # fmt: skip
    assert (same.id, created) == (first, False)
    with pytest.raises(AlreadyExists):
        await node.schedules.create(SCOPE, "tick", every(2), paused=False, actor=ACTOR)


async def test_retention_forgets_old_ledger_rows(node: Node, clock: FakeClock) -> None:
    await create(node, "hourly", every(3600))
    clock.advance(timedelta(hours=1))
    await run(node)
    clock.advance(timedelta(days=8))
    await run(node)  # the missed slots are recorded now: recent rows
    before = len(await ledger(node, "hourly"))
    assert await node.schedules.prune_fires(7 * 86_400_000) == 1  # slot 1 alone is old
    assert len(await ledger(node, "hourly")) == before - 1


async def test_an_interval_without_start_counts_from_the_creation(
    node: Node, clock: FakeClock
) -> None:
    clock.advance(12_345.678)  # created at an odd moment: the first fire one interval later
    await create(node, "tick", every(60))
    view = await node.schedules.get(SCOPE, "tick", preview_count=2)
    # Counted from the creation to the millisecond.
    assert view.preview == [START + timedelta(seconds=72.345), START + timedelta(seconds=132.345)]


async def test_a_full_queue_holds_its_schedules_back_and_others_fire(
    node: Node, clock: FakeClock
) -> None:
    await node.queues.update(SCOPE, "reports", QueueSettings(max_pending=1), actor=ACTOR)
    await create(node, "tick", every(1))
    elsewhere = {"queue": "elsewhere", "type": "t"}
    await create(node, "other", Definition(TimingSpec(None, "UTC", 1000), elsewhere,
                                           overlap=Overlap.ALLOW))  # fmt: skip
    clock.advance(1000)
    await run(node)  # slot 1 of each fires: "reports" is now full
    clock.advance(1000)
    report = await node.scheduler.run_due()  # slot 2 of "tick" cannot fire; "other" fires
    assert report.outcomes == {"fired": 1}
    tick = (await node.schedules.get(SCOPE, "tick")).schedule
    assert tick.next_fire_at == START + timedelta(seconds=2)  # not decided: no ledger row
    assert tick.due_at == clock.now() + timedelta(seconds=1)
    assert offsets(await ledger(node, "tick"), "fired") == [1]
    [first] = await ledger(node, "tick")
    await node.tasks.cancel(SCOPE, first.task_id or "", reason=None, actor=ACTOR)
    clock.advance(500)
    assert (await run(node)).handled == 0  # not due before its retry
    clock.advance(500)
    report = await node.scheduler.run_due()  # slots 2 and 3 are two tasks; there is room for one
    assert (report.handled, report.outcomes) == (2, {"fired": 1})  # "other" fires, "tick" waits
    await node.queues.update(SCOPE, "reports", QueueSettings(max_pending=10), actor=ACTOR)
    clock.advance(1000)
    await run(node)  # room: slot 2 has grown late and is caught up, slots 3 and 4 fire on time
    fires = await ledger(node, "tick")
    assert [f.outcome for f in fires] == ["fired"] * 4
    assert [f.cause for f in fires] == ["schedule", "catchup", "schedule", "schedule"]


async def test_a_change_through_a_node_whose_clock_lags_never_plans_a_decided_slot(
    node: Node, db: Database, settings: Settings, clock: FakeClock
) -> None:
    await create(node, "tick", every(1))
    clock.advance(3000)
    await run(node)  # slots 1-3 are in the ledger
    behind = FakeClock(clock.now() - timedelta(milliseconds=300))
    lagging = await build_node(settings, db=db, clock=behind)
    changed = await lagging.schedules.update(
        SCOPE, "tick", {"end_at": START + timedelta(hours=1)}, expected_version=None, actor=ACTOR
    )
    assert changed.next_fire_at == START + timedelta(seconds=4)  # not slot 3 again
    clock.advance(1000)
    await run(node)
    assert offsets(await ledger(node, "tick"), "fired") == [1, 2, 3, 4]


async def test_a_pass_that_meets_a_decided_slot_leaves_it_and_goes_on(
    node: Node, db: Database, clock: FakeClock
) -> None:
    schedule_id = await create(node, "tick", every(1))
    clock.advance(2000)
    await run(node)  # slots 1 and 2
    record = (await node.schedules.get(SCOPE, "tick")).schedule
    moved_back = START + timedelta(seconds=2)  # as a faulty change would have left it
    await db.run(lambda tx: sstore.schedule_update(
        tx, replace(record, next_fire_at=moved_back, due_at=moved_back)))  # fmt: skip
    clock.advance(1000)
    report = await node.scheduler.run_due()  # slot 2 again, and slot 3
    assert report.outcomes == {"fired": 1}
    fires = await ledger(node, "tick")
    assert offsets(fires, "fired") == [1, 2, 3] and len({f.task_id for f in fires}) == 3
    assert (await node.schedules.get(SCOPE, "tick")).schedule.next_fire_at == START + timedelta(
        seconds=4
    )
    assert schedule_id == record.id


async def test_a_full_queue_takes_the_schedules_that_fit_in_due_order(
    node: Node, clock: FakeClock
) -> None:
    await node.queues.update(SCOPE, "reports", QueueSettings(max_pending=5), actor=ACTOR)
    for i in range(10):
        await create(node, f"s{i}", every(60))
    clock.advance(60_000)
    report = await node.scheduler.run_due()
    assert (report.handled, report.outcomes) == (10, {"fired": 5})
    views = [await node.schedules.get(SCOPE, f"s{i}") for i in range(10)]
    assert sorted(len(v.recent) for v in views) == [0] * 5 + [1] * 5


async def test_retention_keeps_a_queued_slot_and_a_lost_row_is_written_anew(
    node: Node, db: Database, clock: FakeClock
) -> None:
    schedule_id = await create(node, "tick", every(3600, overlap=Overlap.QUEUE_ONE))
    clock.advance(timedelta(hours=1))
    await run(node)  # slot 1 fires
    clock.advance(timedelta(hours=1))
    await run(node)  # slot 2 queued
    await node.schedules.pause(SCOPE, "tick", reason=None, actor=ACTOR)
    clock.advance(timedelta(days=8))
    await run(node)  # paused: the queued slot waits
    assert await node.schedules.prune_fires(7 * 86_400_000) == 1  # slot 1's row, not slot 2's
    # A row lost all the same (before rows of queued slots were kept, retention took them).
    await db.run(
        lambda tx: tx.execute_script(["DELETE FROM schedule_fires WHERE outcome = 'queued'"])
    )
    await node.schedules.resume(SCOPE, "tick", actor=ACTOR)
    first = (await node.tasks.list_tasks(SCOPE, limit=10))[0][-1]
    await node.tasks.cancel(SCOPE, first.id, reason=None, actor=ACTOR)
    report = await node.scheduler.run_due()  # resumed: due at once, the queued slot fires
    assert report.outcomes["fired"] == 1
    slot2 = await db.read(lambda tx: sstore.fires_between(
        tx, schedule_id, START + timedelta(hours=2), START + timedelta(hours=2)))  # fmt: skip
    assert [(f.outcome, f.task_id is not None) for f in slot2.values()] == [("fired", True)]


async def test_backfills_stay_within_the_bounds_and_wait_for_room(
    node: Node, clock: FakeClock
) -> None:
    end = START + timedelta(seconds=5)
    await create(node, "bounded", every(1, start_at=START, end_at=end))
    await create(node, "other", Definition(TimingSpec(None, "UTC", 1000),
                                           {"queue": "full", "type": "t"}))  # fmt: skip
    await node.queues.update(SCOPE, "full", QueueSettings(max_pending=1), actor=ACTOR)
    await node.schedules.pause(SCOPE, "bounded", reason=None, actor=ACTOR)
    await node.schedules.pause(SCOPE, "other", reason=None, actor=ACTOR)
    clock.advance(20_000)
    await run(node)  # every slot recorded paused
    blocked = await node.schedules.backfill(SCOPE, "other", START, clock.now(), actor=ACTOR)
    bounded = await node.schedules.backfill(SCOPE, "bounded", START, clock.now(), actor=ACTOR)
    while (await node.scheduler.run_backfills()).handled:
        pass
    done = await node.schedules.backfill_status(SCOPE, "bounded", bounded.id)
    assert (done.state, done.fired) == ("done", 6)  # 0..5 s, none after end_at
    stuck = await node.schedules.backfill_status(SCOPE, "other", blocked.id)
    assert (stuck.state, stuck.fired) == ("running", 1)  # one slot's room, then it waits


async def test_creating_again_after_a_pause_answers_the_schedule(node: Node) -> None:
    first = await create(node, "tick", every(1))
    await node.schedules.pause(SCOPE, "tick", reason=None, actor=ACTOR)
    again, created = await node.schedules.create(SCOPE, "tick", every(1), paused=False,
                                                 actor=ACTOR)  # fmt: skip
    assert (again.id, again.paused, created) == (first, True, False)


async def test_the_list_has_each_schedules_newest_entries(node: Node, clock: FakeClock) -> None:
    for name, seconds in (("a", 1), ("b", 2), ("c", 3600)):
        await create(node, name, every(seconds))
    clock.advance(4000)
    await run(node)
    views = await node.schedules.list_schedules(SCOPE, after=None, limit=10)
    assert [(v.schedule.name, [(f.fire_at - START).total_seconds() for f in v.recent])
            for v in views] == [("a", [4, 3, 2, 1]), ("b", [4, 2]), ("c", [])]  # fmt: skip


async def test_deleting_a_schedule_skips_its_queued_slot(
    node: Node, db: Database, clock: FakeClock
) -> None:
    schedule_id = await create(node, "tick", every(1, overlap=Overlap.QUEUE_ONE))
    clock.advance(2000)
    await run(node)  # slot 1 fires, slot 2 is queued behind it
    await node.schedules.delete(SCOPE, "tick", actor=ACTOR)
    kept = await db.read(lambda tx: sstore.fires_newest(tx, schedule_id, before=None, limit=10))
    assert [f.outcome for f in kept] == ["skipped", "fired"]
