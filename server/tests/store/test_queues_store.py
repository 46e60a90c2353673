"""Conformance: the queues' store methods, on every dialect."""

from __future__ import annotations

from datetime import timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.pulse.model import Queue
from orbit_server.store import Database, Tx
from orbit_server.store import claim_range as ready_store
from orbit_server.store import queues as queue_store
from orbit_server.store.queues import QueueConfig
from tests.store.builders import OTHER, SCOPE, insert, task


async def counts(tx: Tx, name: str = "emails") -> tuple[int, int]:
    queue = await queue_store.queue_get(tx, SCOPE, name)
    assert queue is not None
    return queue.pending, queue.active


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
    now = clock.now()
    created = await db.run(lambda tx: queue_store.queue_lock_or_create(tx, SCOPE, "new", now))
    existing = await db.run(lambda tx: queue_store.queue_lock_or_create(tx, SCOPE, "emails", now))
    assert (created.name, existing.name) == ("new", "emails")
    later = clock.advance(1000)
    config = QueueConfig(paused=True, concurrency_limit=5, key_concurrency=2, max_pending=100)
    await db.run(lambda tx: queue_store.queue_update_settings(tx, SCOPE, "emails", config, later))

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
    settings = (plain.paused, plain.concurrency_limit, plain.key_concurrency, plain.max_pending)
    assert settings == (True, 5, 2, 100)
    assert plain.updated_at == later and plain.created_at < later
    assert names == ["emails", "new", "reports"] and after == ["new", "reports"]


@pytest.mark.covers("queue_add_pending_within", "queue_add_counts")
async def test_pending_is_counted_only_into_an_existing_queue_within_its_quota(
    db: Database, clock: FakeClock
) -> None:
    now = clock.now()

    async def unit(tx: Tx) -> tuple[list[bool], tuple[int, int]]:
        missing = await queue_store.queue_add_pending_within(tx, SCOPE, "emails", 1, now)
        await queue_store.queue_ensure(tx, SCOPE, "emails", now)
        await queue_store.queue_update_settings(
            tx, SCOPE, "emails", QueueConfig(False, None, 1, 3), now
        )
        within = await queue_store.queue_add_pending_within(tx, SCOPE, "emails", 3, now)
        over = await queue_store.queue_add_pending_within(tx, SCOPE, "emails", 1, now)
        await queue_store.queue_add_counts(tx, SCOPE, "emails", pending=-2, active=2, now=now)
        await queue_store.queue_add_counts(tx, SCOPE, "emails", now=now)  # nothing to move
        return [missing, within, over], await counts(tx)

    assert await db.run(unit) == ([False, True, False], (1, 2))


@pytest.mark.covers("queue_take_active_within", "queue_take_direct")
async def test_claims_and_direct_leases_are_counted_only_where_the_queue_allows(
    db: Database, clock: FakeClock
) -> None:
    now = clock.now()

    async def configure(tx: Tx, *, paused: bool, limit: int | None) -> None:
        config = QueueConfig(paused=paused, concurrency_limit=limit, key_concurrency=1,
                             max_pending=None)  # fmt: skip
        await queue_store.queue_update_settings(tx, SCOPE, "emails", config, now)

    async def unit(tx: Tx) -> tuple[list[bool], list[bool], tuple[int, int]]:
        await queue_store.queue_ensure(tx, SCOPE, "emails", now)
        await queue_store.queue_add_counts(tx, SCOPE, "emails", pending=5, now=now)
        await configure(tx, paused=False, limit=3)
        took = [
            await queue_store.queue_take_active_within(tx, SCOPE, "emails", 2, now),
            await queue_store.queue_take_active_within(tx, SCOPE, "emails", 2, now),  # 4 > 3
            await queue_store.queue_take_active_within(tx, SCOPE, "emails", 1, now),
        ]
        await queue_store.queue_add_counts(tx, SCOPE, "emails", active=-3, now=now)
        await configure(tx, paused=True, limit=3)
        took.append(await queue_store.queue_take_active_within(tx, SCOPE, "emails", 1, now))
        # A direct lease needs an open queue without a limit and nothing of its type waiting.
        direct = [await queue_store.queue_take_direct(tx, SCOPE, "emails", "send", now)]
        await configure(tx, paused=False, limit=3)
        direct.append(await queue_store.queue_take_direct(tx, SCOPE, "emails", "send", now))
        await configure(tx, paused=False, limit=None)
        direct.append(await queue_store.queue_take_direct(tx, SCOPE, "emails", "send", now))
        await ready_store.task_ready_insert(tx, task(clock, "t1"))
        direct.append(await queue_store.queue_take_direct(tx, SCOPE, "emails", "send", now))
        direct.append(await queue_store.queue_take_direct(tx, SCOPE, "emails", "bill", now))
        direct.append(await queue_store.queue_take_direct(tx, SCOPE, "missing", "send", now))
        return took, direct, await counts(tx)

    took, direct, after = await db.run(unit)
    assert took == [True, False, True, False]
    assert direct == [False, False, True, False, True, False]
    assert after == (2, 2)  # the two direct leases count as active, not as pending


@pytest.mark.covers("queues_with_work", "queues_oldest_pending")
async def test_the_sampler_reads_depth_from_counters_and_the_oldest_pending_task(
    db: Database, clock: FakeClock
) -> None:
    first = task(clock, "t1")
    clock.advance(1000)
    second = task(clock, "t2")
    later = task(clock, "t3", queue="reports", run_at=clock.now() + timedelta(minutes=5))
    await insert(db, first, second, later, task(clock, "t4", OTHER))
    now = clock.now()

    async def setup(tx: Tx) -> None:
        for scope, name in ((SCOPE, "emails"), (SCOPE, "reports"), (OTHER, "emails"),
                            (SCOPE, "idle")):  # fmt: skip
            await queue_store.queue_ensure(tx, scope, name, now)
        await queue_store.queue_add_counts(tx, SCOPE, "emails", pending=2, active=3, now=now)
        await queue_store.queue_add_counts(tx, SCOPE, "reports", pending=1, now=now)
        await queue_store.queue_add_counts(tx, OTHER, "emails", pending=1, now=now)

    await db.run(setup)

    async def read(tx: Tx) -> tuple[object, ...]:
        depths = await queue_store.queues_with_work(tx, limit=10)
        capped = await queue_store.queues_with_work(tx, limit=1)
        oldest = await queue_store.queues_oldest_pending(tx, [(d.scope, d.name) for d in depths])
        return depths, capped, oldest

    depths, capped, oldest = await db.read(read)
    assert [(d.scope, d.name, d.waiting, d.active) for d in depths] == [
        (SCOPE, "emails", 2, 3), (SCOPE, "reports", 1, 0), (OTHER, "emails", 1, 0),
    ]  # fmt: skip
    assert [(d.scope, d.name) for d in capped] == [(SCOPE, "emails")]
    # The first pending task of each queue; "reports" holds only a scheduled one.
    assert oldest == {(SCOPE, "emails"): first.run_at, (OTHER, "emails"): now}
