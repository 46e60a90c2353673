"""Conformance: the result events' store methods, on every dialect."""

from __future__ import annotations

import pytest

from orbit_server.clock import FakeClock
from orbit_server.pulse.model import ResultEvent
from orbit_server.pulse.states import TaskState
from orbit_server.store import Database, Tx
from orbit_server.store import task_events as event_store
from orbit_server.store.base import DuplicateKey
from tests.store.builders import SCOPE


def event(clock: FakeClock, n: int, owner_kind: str | None = None) -> ResultEvent:
    return ResultEvent(
        id=f"evt_{n:02d}", scope=SCOPE, task_id=f"t{n}", attempt=1, state=TaskState.SUCCEEDED,
        owner_kind=owner_kind, owner_id=None if owner_kind is None else "wf_1",
        created_at=clock.now(), seq=1,
    )  # fmt: skip


async def pending(tx: Tx, owner_kind: str | None = None, after: str = "") -> list[str]:
    if owner_kind is None:
        found = await event_store.task_event_list_pending(tx, limit=10, after=after)
    else:
        found = await event_store.task_event_list_pending_owned(
            tx, owner_kind, limit=10, after=after
        )
    return [e.id for e in found]


@pytest.mark.covers("task_event_insert_now")
async def test_an_event_written_at_once_is_refused_the_second_time(
    db: Database, clock: FakeClock
) -> None:
    one = event(clock, 1, None)
    await db.run(lambda tx: event_store.task_event_insert_now(tx, one))
    with pytest.raises(DuplicateKey):  # raised by the call itself, where its caller catches it
        await db.run(lambda tx: event_store.task_event_insert_now(tx, one))
    assert await db.read(lambda tx: event_store.task_event_list_pending(tx, limit=5)) == [one]


@pytest.mark.covers(
    "task_events_insert_many", "task_event_list_pending", "task_event_list_pending_owned",
    "task_event_mark_processed", "task_events_mark_processed_many",
    "task_events_pending_owned_count",
)  # fmt: skip
async def test_events_are_listed_until_processed_once(db: Database, clock: FakeClock) -> None:
    events = [event(clock, n, "workflow" if n % 2 else None) for n in range(1, 6)]
    await db.run(lambda tx: event_store.task_events_insert_many(tx, events))
    await db.run(lambda tx: event_store.task_events_insert_many(tx, []))
    with pytest.raises(DuplicateKey):
        await db.run(lambda tx: event_store.task_events_insert_many(tx, events[:1]))
    first = await db.read(lambda tx: event_store.task_event_list_pending(tx, limit=2))
    assert first == events[:2]
    assert await db.read(lambda tx: pending(tx, after="evt_02")) == ["evt_03", "evt_04", "evt_05"]
    assert await db.read(lambda tx: pending(tx, "workflow")) == ["evt_01", "evt_03", "evt_05"]
    assert await db.read(lambda tx: pending(tx, "workflow", after="evt_03")) == ["evt_05"]

    async def count(tx: Tx) -> list[int]:
        return [await event_store.task_events_pending_owned_count(tx, "workflow", most=m)
                for m in (10, 2)]  # fmt: skip

    assert await db.read(count) == [3, 2]
    now = clock.now()

    async def process(tx: Tx) -> tuple[list[bool], set[str], set[str]]:
        once = [
            await event_store.task_event_mark_processed(tx, "evt_01", now),
            await event_store.task_event_mark_processed(tx, "evt_01", now),
        ]
        many = await event_store.task_events_mark_processed_many(tx, ["evt_01", "evt_02", "x"], now)
        none = await event_store.task_events_mark_processed_many(tx, [], now)
        return once, many, none

    assert await db.run(process) == ([True, False], {"evt_02"}, set())
    assert await db.read(pending) == ["evt_03", "evt_04", "evt_05"]
    assert await db.read(count) == [2, 2]


@pytest.mark.covers("task_events_delete_for_tasks")
async def test_a_pruned_tasks_events_are_deleted_processed_or_not(
    db: Database, clock: FakeClock
) -> None:
    events = [event(clock, n) for n in (1, 2, 3)]

    async def unit(tx: Tx) -> int:
        await event_store.task_events_insert_many(tx, events)
        await event_store.task_event_mark_processed(tx, "evt_01", clock.now())
        return await event_store.task_events_delete_for_tasks(tx, ["t1", "t2", "t9"])

    assert await db.run(unit) == 2
    assert await db.read(pending) == ["evt_03"]
