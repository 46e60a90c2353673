"""A schedule or backfill that cannot be fired fails alone and says why, and the scheduler's
loop goes on serving the others; a backfill is bounded in slots (SPEC P9, issue 17: H2, M6)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from orbit_server.clock import FakeClock
from orbit_server.errors import InvalidRequest
from orbit_server.pulse.loops import scheduler_loop
from orbit_server.pulse.schedule_model import Backfill
from orbit_server.pulse.scheduler import INTERNAL_FAILURE, PassReport
from orbit_server.pulse.schedules import Definition, TimingSpec
from orbit_server.runtime.node import Node
from orbit_server.store import Tx
from orbit_server.store import schedules as sstore
from tests.conftest import SCOPE
from tests.service.test_schedules import ACTOR, START, create, every, ledger, offsets, run


async def stored_backfill(node: Node, name: str, start: datetime, end: datetime) -> str:
    """A running backfill written as an earlier release accepted it, unchecked."""
    schedule = (await node.schedules.get(SCOPE, name)).schedule
    record = Backfill(
        id=f"bkf_{name}", schedule_id=schedule.id, scope=SCOPE, schedule=name, from_at=start,
        to_at=end, cursor_at=None, state="running", fired=0, existing=0,
        created_at=node.clock.now(), finished_at=None,
    )  # fmt: skip

    async def unit(tx: Tx) -> None:
        await sstore.backfill_insert(tx, record)

    await node.db.run(unit)
    return record.id


async def break_template(node: Node, name: str) -> None:
    """The schedule's stored template no longer makes a task (its type is gone)."""
    schedule = (await node.schedules.get(SCOPE, name)).schedule

    async def unit(tx: Tx) -> None:
        await sstore.schedule_update(tx, replace(schedule, task={"queue": "reports"}))

    await node.db.run(unit)


async def until(
    loop: asyncio.Task[None], reports: asyncio.Event, check: Callable[[], Awaitable[bool]]
) -> None:
    """Wait, pass report by pass report, until ``check`` holds; fail as soon as the loop ends."""
    for _ in range(1000):
        if await check():
            return
        reports.clear()
        reported = asyncio.ensure_future(reports.wait())
        await asyncio.wait({reported, loop}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        reported.cancel()
        assert not loop.done(), f"the scheduler loop stopped: {loop.exception()!r}"
    raise AssertionError("the scheduler never got there")


async def test_a_bad_backfill_and_a_bad_schedule_fail_alone_and_the_loop_serves_the_others(
    node: Node, clock: FakeClock
) -> None:
    await create(node, "good", every(1))
    await create(node, "bad", every(1, start_at=START - timedelta(seconds=10)))
    await create(node, "old", every(60))
    await break_template(node, "bad")
    # The backfill of the report, stored before such times were refused: the first day of the
    # calendar (SQLite's text times cannot hold years before 1000: its first day then).
    year = 1 if node.db.dialect == "mysql" else 1000
    ancient = await stored_backfill(
        node, "old", datetime(year, 1, 1, tzinfo=UTC), datetime(year, 1, 2, tzinfo=UTC)
    )
    broken = await stored_backfill(node, "bad", START - timedelta(seconds=3), START)
    clock.advance(1000)
    reports = asyncio.Event()
    seen: list[PassReport] = []

    def report(done: PassReport) -> None:
        seen.append(done)
        reports.set()

    loop = asyncio.create_task(scheduler_loop(node.scheduler, report, refresh_s=0.05))
    try:

        async def settled() -> bool:
            backfills = [
                await node.schedules.backfill_status(SCOPE, name, backfill_id)
                for name, backfill_id in (("old", ancient), ("bad", broken))
            ]
            bad = (await node.schedules.get(SCOPE, "bad")).schedule
            fired = offsets(await ledger(node, "good"), "fired")
            return (
                fired == [1]
                and bad.failure is not None
                and {b.state for b in backfills} <= {"done", "failed"}
            )

        await until(loop, reports, settled)
        old = await node.schedules.backfill_status(SCOPE, "old", ancient)
        assert (old.state, old.fired, old.failure) == ("done", 0, None)  # no slot before 1970
        failed = await node.schedules.backfill_status(SCOPE, "bad", broken)
        assert (failed.state, failed.failure) == ("failed", INTERNAL_FAILURE)
        bad = (await node.schedules.get(SCOPE, "bad")).schedule
        assert bad.failure == INTERNAL_FAILURE
        assert bad.due_at == clock.now() + timedelta(minutes=1)  # set aside, tried again later
        assert await ledger(node, "bad") == []

        clock.advance(1000)  # the loop goes on: the good schedule's next slot fires
        node.scheduler.wake()

        async def next_slot() -> bool:
            return offsets(await ledger(node, "good"), "fired") == [1, 2]

        await until(loop, reports, next_slot)
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop

    # Mended, the set-aside schedule fires when it is tried again, and its failure goes.
    await node.schedules.update(
        SCOPE, "bad", {"task": {"queue": "reports", "type": "build"}}, expected_version=None,
        actor=ACTOR,
    )  # fmt: skip
    clock.advance(60_000)
    await run(node)
    mended = (await node.schedules.get(SCOPE, "bad")).schedule
    assert mended.failure is None and mended.last_task_id is not None


async def test_a_schedule_whose_timing_cannot_be_read_says_why(
    node: Node, clock: FakeClock
) -> None:
    every_second = Definition(TimingSpec("* * * * * *", "UTC", None), {"queue": "q", "type": "t"})
    await create(node, "tick", every_second)
    schedule = (await node.schedules.get(SCOPE, "tick")).schedule
    wrong = replace(schedule, timezone="Mars/Olympus", version=2)

    async def unit(tx: Tx) -> None:
        await sstore.schedule_update(tx, wrong)  # a zone the system no longer knows

    await node.db.run(unit)
    backfill = await stored_backfill(node, "tick", START - timedelta(seconds=5), START)
    clock.advance(1000)
    assert (await run(node)).handled == 1
    failure = (await node.schedules.get(SCOPE, "tick")).schedule.failure
    assert failure is not None and "unknown time zone 'Mars/Olympus'" in failure
    while (await node.scheduler.run_backfills()).handled:
        pass
    failed = await node.schedules.backfill_status(SCOPE, "tick", backfill)
    assert failed.state == "failed" and failed.failure == failure


async def test_backfill_times_outside_the_calendar_are_refused_at_the_edge(node: Node) -> None:
    await create(node, "tick", every(60))
    for start, end in (
        (datetime(1, 1, 1, tzinfo=UTC), datetime(1, 1, 2, tzinfo=UTC)),
        (datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))), START),
        (datetime(1969, 12, 31, tzinfo=UTC), START),
    ):
        with pytest.raises(InvalidRequest, match="backfill's from must be from 1970") as caught:
            await node.schedules.backfill(SCOPE, "tick", start, end, actor=ACTOR)
        assert caught.value.details == {"field": "from"}
    assert await node.schedules.backfills(SCOPE, "tick", limit=10) == []


async def test_a_backfill_of_more_slots_than_the_maximum_is_refused_with_the_count(
    node: Node, clock: FakeClock
) -> None:
    every_second = Definition(TimingSpec("* * * * * *", "UTC", None), {"queue": "q", "type": "t"})
    await create(node, "seconds", every_second, paused=True)
    with pytest.raises(InvalidRequest, match="at most 10000") as caught:
        await node.schedules.backfill(
            SCOPE, "seconds", datetime(2000, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC),
            actor=ACTOR,
        )  # fmt: skip
    assert caught.value.details == {"slots": 10_001, "exact": False, "max_slots": 10_000}
    assert "holds more than 10000 slots" in caught.value.message
    # A cron's pace is not even: the first slots of a range say nothing of the rest.
    january = Definition(TimingSpec("* * 1 1 *", "UTC", None), {"queue": "q", "type": "t"})
    await create(node, "new-year", january, paused=True)
    await node.schedules.backfill(  # 1,440 slots a year for 5 years: 7,200, accepted
        SCOPE, "new-year", datetime(2020, 1, 1, tzinfo=UTC), datetime(2025, 1, 1, tzinfo=UTC),
        actor=ACTOR,
    )  # fmt: skip
    monthly = Definition(TimingSpec("* * 1 * *", "UTC", None), {"queue": "q", "type": "t"})
    await create(node, "first-days", monthly, paused=True)
    with pytest.raises(InvalidRequest) as many:  # 30 months of whole first days: 43,200
        await node.schedules.backfill(
            SCOPE, "first-days", datetime(2020, 1, 1, tzinfo=UTC),
            datetime(2022, 7, 1, tzinfo=UTC), actor=ACTOR,
        )  # fmt: skip
    assert many.value.details["exact"] is False
    await create(node, "tick", every(1))
    clock.advance(20_000)
    await run(node)
    with pytest.raises(InvalidRequest) as exact:
        await node.schedules.backfill(
            SCOPE, "tick", START + timedelta(seconds=1), START + timedelta(seconds=12),
            actor=ACTOR, max_slots=10,
        )  # fmt: skip
    assert exact.value.details == {"slots": 11, "exact": True, "max_slots": 10}
    admitted: list[int] = []
    await node.schedules.backfill(
        SCOPE, "tick", START + timedelta(seconds=1), START + timedelta(seconds=11), actor=ACTOR,
        max_slots=10, admit=admitted.append,
    )  # fmt: skip
    assert admitted == [10]  # counted against the submit limits
    assert [b.state for b in await node.schedules.backfills(SCOPE, "seconds", limit=5)] == []


async def test_a_backfill_whose_timing_grew_stops_at_the_maximum(
    node: Node, clock: FakeClock
) -> None:
    node.scheduler.backfill_max_slots = 10
    await create(node, "tick", every(10, start_at=START))
    await node.schedules.pause(SCOPE, "tick", reason=None, actor=ACTOR)
    clock.advance(100_000)
    await run(node)
    backfill = await node.schedules.backfill(
        SCOPE, "tick", START, clock.now(), actor=ACTOR, max_slots=10
    )
    # Every second now: the range holds 100 slots, more than the backfill may take.
    await node.schedules.update(
        SCOPE, "tick", {"interval_ms": 1000}, expected_version=None, actor=ACTOR
    )
    while (await node.scheduler.run_backfills()).handled:
        pass
    stopped = await node.schedules.backfill_status(SCOPE, "tick", backfill.id)
    assert (stopped.state, stopped.fired) == ("failed", 0)
    assert stopped.failure == "it reached the most slots a backfill covers (10)"
