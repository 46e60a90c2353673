"""Conformance: every Pulse store method, on every dialect."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.pulse.model import Owner, Queue, ResultEvent, Task, TaskSpec, new_task
from orbit_server.scope import Scope
from orbit_server.store import Database, Tx
from orbit_server.store import attempts as attempt_store
from orbit_server.store import claim_range as ready_store
from orbit_server.store import permits as permit_store
from orbit_server.store import queues as queue_store
from orbit_server.store import task_events as event_store
from orbit_server.store import tasks as task_store
from orbit_server.store.base import DuplicateKey
from orbit_server.store.queues import QueueConfig
from orbit_server.store.tasks import TaskMove

SCOPE = Scope("acme", "prod")
OTHER = Scope("acme", "staging")


def task(clock: FakeClock, task_id: str, scope: Scope = SCOPE, **spec: object) -> Task:
    fields: dict[str, object] = {"queue": "emails", "type": "send"}
    fields.update(spec)
    return new_task(
        TaskSpec(**fields),  # type: ignore[arg-type]
        task_id=task_id,
        scope=scope,
        now=clock.now(),
        default_timeout_ms=300_000,
    )


async def insert(db: Database, *tasks: Task) -> None:
    async def unit(tx: Tx) -> None:
        for t in tasks:
            await task_store.task_insert(tx, t)

    await db.run(unit)


@pytest.mark.covers(
    "queue_ensure", "queue_get", "queue_list", "queue_update_settings", "queue_lock_or_create"
)
async def test_queues_are_created_once_listed_and_configured(
    db: Database, clock: FakeClock
) -> None:
    async def unit(tx: Tx) -> tuple[bool, bool]:
        first = await queue_store.queue_ensure(tx, SCOPE, "emails", clock.now())
        again = await queue_store.queue_ensure(tx, SCOPE, "emails", clock.now())
        await queue_store.queue_ensure(tx, SCOPE, "reports", clock.now())
        await queue_store.queue_ensure(tx, OTHER, "emails", clock.now())
        return first, again

    assert await db.run(unit) == (True, False)
    created = await db.run(
        lambda tx: queue_store.queue_lock_or_create(tx, SCOPE, "new", clock.now())
    )
    existing = await db.run(
        lambda tx: queue_store.queue_lock_or_create(tx, SCOPE, "emails", clock.now())
    )
    assert (created.name, existing.name) == ("new", "emails")
    later = clock.advance(1000)

    async def configure(tx: Tx) -> None:
        await queue_store.queue_update_settings(
            tx, SCOPE, "emails", QueueConfig(True, 5, 2, 100), later
        )

    await db.run(configure)

    async def read(tx: Tx) -> tuple[object, ...]:
        return (
            await queue_store.queue_get(tx, SCOPE, "emails"),
            await queue_store.queue_get(tx, SCOPE, "emails", lock=True),
            await queue_store.queue_get(tx, SCOPE, "missing"),
            [q.name for q in await queue_store.queue_list(tx, SCOPE, limit=10)],
            [q.name for q in await queue_store.queue_list(tx, SCOPE, limit=10, after="emails")],
        )

    plain, locked, missing, names, after = await db.run(read)
    assert plain == locked and missing is None
    assert isinstance(plain, Queue)
    assert (plain.paused, plain.concurrency_limit, plain.key_concurrency, plain.max_pending) == (
        True,
        5,
        2,
        100,
    )
    assert plain.updated_at == later and plain.created_at < later
    assert names == ["emails", "new", "reports"] and after == ["new", "reports"]


@pytest.mark.covers("queue_add_pending_within")
async def test_pending_is_counted_only_into_an_existing_queue_within_its_quota(
    db: Database, clock: FakeClock
) -> None:
    async def unit(tx: Tx) -> tuple[list[bool], int]:
        missing = await queue_store.queue_add_pending_within(tx, SCOPE, "emails", 1, clock.now())
        await queue_store.queue_ensure(tx, SCOPE, "emails", clock.now())
        await queue_store.queue_update_settings(
            tx, SCOPE, "emails", QueueConfig(False, None, 1, 3), clock.now()
        )
        within = await queue_store.queue_add_pending_within(tx, SCOPE, "emails", 3, clock.now())
        over = await queue_store.queue_add_pending_within(tx, SCOPE, "emails", 1, clock.now())
        queue = await queue_store.queue_get(tx, SCOPE, "emails")
        assert queue is not None
        return [missing, within, over], queue.pending

    assert await db.run(unit) == ([False, True, False], 3)


@pytest.mark.covers("queue_take_active_within")
async def test_a_claim_is_counted_only_within_the_concurrency_limit_of_an_open_queue(
    db: Database, clock: FakeClock
) -> None:
    async def limit(tx: Tx, *, paused: bool) -> None:
        await queue_store.queue_update_settings(
            tx, SCOPE, "emails", QueueConfig(paused, 3, 1, None), clock.now()
        )

    async def unit(tx: Tx) -> tuple[list[bool], tuple[int, int]]:
        await queue_store.queue_ensure(tx, SCOPE, "emails", clock.now())
        await queue_store.queue_add_counts(tx, SCOPE, "emails", pending=5, now=clock.now())
        await limit(tx, paused=False)
        took = [
            await queue_store.queue_take_active_within(tx, SCOPE, "emails", 2, clock.now()),
            await queue_store.queue_take_active_within(
                tx, SCOPE, "emails", 2, clock.now()
            ),  # 4 > 3
            await queue_store.queue_take_active_within(tx, SCOPE, "emails", 1, clock.now()),
        ]
        await queue_store.queue_add_counts(tx, SCOPE, "emails", active=-3, now=clock.now())
        await limit(tx, paused=True)
        took.append(await queue_store.queue_take_active_within(tx, SCOPE, "emails", 1, clock.now()))
        queue = await queue_store.queue_get(tx, SCOPE, "emails")
        assert queue is not None
        return took, (queue.pending, queue.active)

    assert await db.run(unit) == ([True, False, True, False], (2, 0))


@pytest.mark.covers("queue_add_counts", "key_permits_ensure", "key_permit_active")
async def test_counters_and_key_permits_move_by_deltas(db: Database, clock: FakeClock) -> None:
    async def unit(tx: Tx) -> tuple[int, int, int]:
        await queue_store.queue_ensure(tx, SCOPE, "emails", clock.now())
        await queue_store.queue_add_counts(tx, SCOPE, "emails", pending=5, now=clock.now())
        await queue_store.queue_add_counts(
            tx, SCOPE, "emails", pending=-2, active=2, now=clock.now()
        )
        await permit_store.key_permits_ensure(tx, SCOPE, "emails", ["user-1"], clock.now())
        await permit_store.key_permits_ensure(
            tx, SCOPE, "emails", ["user-1"], clock.now()
        )  # idempotent
        await permit_store.key_permits_add_many(tx, SCOPE, "emails", {"user-1": 2}, clock.now())
        await permit_store.key_permits_add_many(tx, SCOPE, "emails", {"user-1": -1}, clock.now())
        queue = await queue_store.queue_get(tx, SCOPE, "emails")
        assert queue is not None
        active = await permit_store.key_permit_active(tx, SCOPE, "emails", "user-1")
        return queue.pending, queue.active, active

    assert await db.run(unit) == (3, 2, 1)
    none = await db.read(lambda tx: permit_store.key_permit_active(tx, SCOPE, "emails", "nobody"))
    assert none == 0


@pytest.mark.covers("key_permits_add_many")
async def test_many_keys_move_by_their_own_deltas(db: Database, clock: FakeClock) -> None:
    keys = ["a", "b", "c", "d"]

    async def unit(tx: Tx) -> list[int]:
        await permit_store.key_permits_ensure(tx, SCOPE, "emails", keys, clock.now())
        await permit_store.key_permits_add_many(
            tx, SCOPE, "emails", {"a": 2, "b": 2, "c": 1, "d": 0}, clock.now()
        )
        await permit_store.key_permits_add_many(tx, SCOPE, "emails", {"a": -1, "c": 3}, clock.now())
        return [await permit_store.key_permit_active(tx, SCOPE, "emails", key) for key in keys]

    assert await db.run(unit) == [1, 2, 4, 0]


@pytest.mark.covers("task_insert", "task_get", "task_get_by_idempotency_key")
async def test_tasks_round_trip_with_every_field(db: Database, clock: FakeClock) -> None:
    full = task(
        clock,
        "t1",
        params={"user": 42, "tags": ["a", "b"], "nested": {"x": 1.5}},
        idempotency_key="welcome-42",
        priority=7,
        concurrency_key="user-42",
        fairness_key="shop-7",
        handler_version="2",
        labels={"team": "growth"},
        owner=Owner("workflow", "wf_1", "send"),
        traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
    )
    await insert(db, full)

    async def read(tx: Tx) -> tuple[object, ...]:
        return (
            await task_store.task_get(tx, SCOPE, "t1"),
            await task_store.task_get(tx, SCOPE, "t1", lock=True),
            await task_store.task_get(tx, OTHER, "t1"),
            await task_store.task_get_by_idempotency_key(tx, SCOPE, "welcome-42"),
            await task_store.task_get_by_idempotency_key(tx, OTHER, "welcome-42"),
        )

    found, locked, foreign, by_key, foreign_key = await db.run(read)
    assert found == full and locked == full and by_key == full
    assert foreign is None and foreign_key is None


@pytest.mark.covers("task_insert")
async def test_an_idempotency_key_is_unique_per_scope(db: Database, clock: FakeClock) -> None:
    await insert(db, task(clock, "t1", idempotency_key="k"), task(clock, "t2"), task(clock, "t3"))
    await insert(db, task(clock, "t4", OTHER, idempotency_key="k"))  # another scope: fine
    with pytest.raises(DuplicateKey):
        await insert(db, task(clock, "t5", idempotency_key="k"))


@pytest.mark.covers("tasks_insert_many", "task_ready_insert_many")
async def test_many_tasks_and_ready_rows_go_in_at_once(db: Database, clock: FakeClock) -> None:
    many = [task(clock, f"m{i}", params={"i": i}) for i in range(5)]

    async def unit(tx: Tx) -> tuple[list[Task | None], bool]:
        await task_store.tasks_insert_many(tx, many)
        await ready_store.task_ready_insert_many(tx, many[:2])
        await task_store.tasks_insert_many(tx, [])  # nothing to do
        found = [await task_store.task_get(tx, SCOPE, t.id) for t in many]
        return found, await ready_store.ready_exists(tx, SCOPE, many[0].queue)

    found, ready = await db.run(unit)
    assert found == many and ready


@pytest.mark.covers("task_list")
async def test_task_lists_page_newest_first_by_filter(db: Database, clock: FakeClock) -> None:
    tasks = [task(clock, f"t{i}", queue="a" if i % 2 else "b") for i in range(6)]
    tasks[5] = dataclasses.replace(tasks[5], state="scheduled")
    await insert(db, *tasks, task(clock, "x9", OTHER))

    async def ids(**filters: object) -> list[str]:
        async def unit(tx: Tx) -> list[Task]:
            return await task_store.task_list(tx, SCOPE, **filters)  # type: ignore[arg-type]

        return [t.id for t in await db.read(unit)]

    assert await ids(limit=3) == ["t5", "t4", "t3"]
    assert await ids(limit=3, before="t3") == ["t2", "t1", "t0"]
    assert await ids(limit=10, queue="a") == ["t5", "t3", "t1"]
    assert await ids(limit=10, state="scheduled") == ["t5"]
    assert await ids(limit=10, queue="a", state="pending") == ["t3", "t1"]
    assert await ids(limit=10, queue="a", state="pending", before="t3") == ["t1"]


@pytest.mark.covers(
    "task_ready_insert", "task_ready_delete", "queue_oldest_ready_at", "queue_state_counts"
)
async def test_the_claim_range_and_queue_statistics(db: Database, clock: FakeClock) -> None:
    first = task(clock, "t1")
    clock.advance(1000)
    second = task(clock, "t2")
    scheduled = dataclasses.replace(task(clock, "t3"), state="scheduled")

    async def unit(tx: Tx) -> None:
        await queue_store.queue_ensure(tx, SCOPE, "emails", clock.now())
        for t in (first, second, scheduled):
            await task_store.task_insert(tx, t)
        await ready_store.task_ready_insert(tx, first)
        await ready_store.task_ready_insert(tx, second)

    await db.run(unit)

    async def stats(tx: Tx) -> tuple[object, dict[str, int]]:
        return (
            await ready_store.queue_oldest_ready_at(tx, SCOPE, "emails"),
            await task_store.queue_state_counts(tx, SCOPE, "emails"),
        )

    assert await db.read(stats) == (first.run_at, {"pending": 2, "scheduled": 1})
    assert await db.run(lambda tx: ready_store.task_ready_delete(tx, "t1")) is True
    assert await db.run(lambda tx: ready_store.task_ready_delete(tx, "t1")) is False
    oldest, _ = await db.read(stats)
    assert oldest == second.run_at
    await db.run(lambda tx: ready_store.task_ready_delete(tx, "t2"))
    assert (await db.read(stats))[0] is None


@pytest.mark.covers("tasks_end_unstarted", "task_request_cancel")
async def test_unstarted_tasks_finish_fenced_and_running_ones_are_asked(
    db: Database, clock: FakeClock
) -> None:
    pending = task(clock, "t1")
    running = dataclasses.replace(task(clock, "t2"), state="running")
    await insert(db, pending, running)
    now = clock.advance(timedelta(seconds=1))

    def cancel(t: Task, reason: str | None) -> TaskMove:
        return TaskMove(t.id, t.state, t.lease_epoch, "cancelled", reason=reason)

    async def finish(tx: Tx) -> int:
        return await task_store.tasks_end_unstarted(tx, [cancel(pending, "r")], now)

    assert await db.run(finish) == 1
    assert await db.run(finish) == 0  # the row is no longer pending: fenced
    stale = dataclasses.replace(running, state="running", lease_epoch=99)

    async def wrong_epoch(tx: Tx) -> int:
        return await task_store.tasks_end_unstarted(tx, [cancel(stale, None)], now)

    assert await db.run(wrong_epoch) == 0

    async def ask(tx: Tx) -> bool:
        return await task_store.task_request_cancel(tx, "t2", "stop", now)

    assert await db.run(ask) is True
    assert await db.run(ask) is False  # already asked
    assert await db.run(lambda tx: task_store.task_request_cancel(tx, "t1", None, now)) is False
    done = await db.read(lambda tx: task_store.task_get(tx, SCOPE, "t1"))
    asked = await db.read(lambda tx: task_store.task_get(tx, SCOPE, "t2"))
    assert done is not None and done.state == "cancelled" and done.finished_at == now
    assert done.cancel_reason == "r"
    assert asked is not None and asked.state == "running" and asked.cancel_requested


@pytest.mark.covers("task_event_insert", "task_event_list_pending")
async def test_result_events_are_unique_per_task_attempt_and_state(
    db: Database, clock: FakeClock
) -> None:
    def event(i: int, state: str = "succeeded", attempt: int = 1) -> ResultEvent:
        return ResultEvent(
            id=f"evt_{i:02d}", scope=SCOPE, task_id=f"t{i}", attempt=attempt, state=state,
            owner_kind="workflow" if i % 2 else None, owner_id="wf" if i % 2 else None,
            created_at=clock.now(),
        )  # fmt: skip

    await insert(db, *(task(clock, f"t{i}") for i in (1, 2, 3)))

    def event_seq1(i: int, state: str = "succeeded") -> ResultEvent:
        return dataclasses.replace(event(i, state), seq=1)

    async def unit(tx: Tx) -> list[bool]:
        return [
            await task_store.task_event_insert(tx, event_seq1(1)),
            await task_store.task_event_insert(tx, event_seq1(2)),
            await task_store.task_event_insert(tx, dataclasses.replace(event_seq1(1), id="evt_99")),
            await task_store.task_event_insert(tx, event_seq1(3, "needs_review")),
        ]

    assert await db.run(unit) == [True, True, False, True]
    first = await db.read(lambda tx: event_store.task_event_list_pending(tx, limit=2))
    assert [e.id for e in first] == ["evt_01", "evt_02"]
    assert first[0].owner_kind == "workflow" and first[0].created_at == clock.now()
    rest = await db.read(
        lambda tx: event_store.task_event_list_pending(tx, limit=2, after="evt_02")
    )
    assert [(e.id, e.state) for e in rest] == [("evt_03", "needs_review")]


@pytest.mark.covers("attempt_list")
async def test_a_task_without_leases_has_no_attempts(db: Database, clock: FakeClock) -> None:
    await insert(db, task(clock, "t1"))
    assert await db.read(lambda tx: attempt_store.attempt_list(tx, "t1")) == []
