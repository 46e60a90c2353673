"""Conformance: the key permits' store methods, on every dialect (a row another transaction
holds is shown on MariaDB only: SQLite has one writer)."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime, timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.pulse.states import TaskState
from orbit_server.store import Database, Tx
from orbit_server.store import claim_range as ready_store
from orbit_server.store import gates as gate_store
from orbit_server.store import permits as permit_store
from orbit_server.store import queues as queue_store
from orbit_server.store import tasks as task_store
from orbit_server.store.permits import KeyAdmission
from orbit_server.store.queues import QueueConfig
from tests.store.builders import SCOPE, task


@pytest.mark.covers("key_permits_ensure", "key_permits_add_many", "key_permit_active",
                    "key_permits_prune")  # fmt: skip
async def test_permits_move_by_their_own_deltas_and_idle_ones_are_pruned(
    db: Database, clock: FakeClock
) -> None:
    keys = ["a", "b", "c", "d", "e"]
    start = clock.now()

    async def unit(tx: Tx) -> list[int]:
        await permit_store.key_permits_ensure(tx, SCOPE, "emails", keys, start)
        await permit_store.key_permits_ensure(tx, SCOPE, "emails", ["a"], start)  # exists: kept
        deltas = {"a": 2, "b": 2, "c": 1, "d": 0}
        await permit_store.key_permits_add_many(tx, SCOPE, "emails", deltas, start)
        await permit_store.key_permits_add_many(tx, SCOPE, "emails", {"a": -1, "c": 3}, start)
        return [await permit_store.key_permit_active(tx, SCOPE, "emails", k) for k in keys]

    assert await db.run(unit) == [1, 2, 4, 0, 0]
    later = clock.advance(timedelta(hours=1))
    await db.run(
        lambda tx: permit_store.key_permits_add_many(tx, SCOPE, "emails", {"a": -1}, later)
    )

    async def prune(before: datetime) -> int:
        return await db.run(lambda tx: permit_store.key_permits_prune(tx, before, limit=1))

    # d and e have been idle since the start; a only since now; b and c hold permits.
    assert [await prune(later), await prune(later), await prune(later)] == [1, 1, 0]
    assert await prune(later + timedelta(seconds=1)) == 1
    assert await db.read(lambda tx: permit_store.key_permit_active(tx, SCOPE, "emails", "b")) == 2


@pytest.mark.covers("key_permits_lock", "key_permits_lock_free")
async def test_permit_rows_are_locked_in_key_order_and_created_when_missing(
    db: Database, clock: FakeClock
) -> None:
    now = clock.now()

    async def unit(tx: Tx) -> tuple[object, ...]:
        await permit_store.key_permits_add_many(tx, SCOPE, "emails", {"a": 2}, now)  # no row yet
        await permit_store.key_permits_ensure(tx, SCOPE, "emails", ["a"], now)
        await permit_store.key_permits_add_many(tx, SCOPE, "emails", {"a": 2}, now)
        return (
            await permit_store.key_permits_lock(tx, SCOPE, "emails", ["b", "a", "b"], now),
            await permit_store.key_permits_lock_free(tx, SCOPE, "emails", ["c", "a"], now),
            await permit_store.key_permits_lock(tx, SCOPE, "emails", [], now),
            await permit_store.key_permits_lock_free(tx, SCOPE, "emails", [], now),
        )

    assert await db.run(unit) == ({"a": 2, "b": 0}, {"a": 2, "c": 0}, {}, {})
    if db.dialect != "mysql":
        return
    held, release = asyncio.Event(), asyncio.Event()

    async def hold(tx: Tx) -> None:
        await permit_store.key_permits_lock(tx, SCOPE, "emails", ["a"], now)
        held.set()
        await release.wait()

    holding = asyncio.create_task(db.run(hold))
    await held.wait()
    try:
        free = await db.run(
            lambda tx: permit_store.key_permits_lock_free(tx, SCOPE, "emails", ["a", "b"], now)
        )
    finally:
        release.set()
        await holding
    assert free == {"b": 0}  # a's row is another transaction's: passed over, not waited for


@pytest.mark.covers("keys_head_pending", "keys_admission")
async def test_a_keys_admission_reads_its_permits_its_head_and_its_rows_in_the_range(
    db: Database, clock: FakeClock
) -> None:
    now = clock.now()
    k1_low, k1_high = (
        task(clock, "t1", concurrency_key="k1"),
        task(clock, "t2", concurrency_key="k1", priority=5),
    )
    closed = task(clock, "t3", concurrency_key="k2", gate_id="g1")
    k2_open = task(clock, "t4", concurrency_key="k2")
    scheduled = dataclasses.replace(
        task(clock, "t5", concurrency_key="k4"), state=TaskState.SCHEDULED
    )

    async def unit(tx: Tx) -> tuple[dict[str, list[str]], dict[str, KeyAdmission]]:
        await queue_store.queue_ensure(tx, SCOPE, "emails", now)
        await queue_store.queue_update_settings(
            tx, SCOPE, "emails", QueueConfig(False, None, 2, None), now
        )
        await gate_store.gate_create(tx, SCOPE, "g1", now)
        await gate_store.gate_set(tx, SCOPE, "g1", open_=False, now=now)
        await task_store.tasks_insert_many(tx, [k1_low, k1_high, closed, k2_open, scheduled])
        await permit_store.key_permits_ensure(tx, SCOPE, "emails", ["k1", "k2", "k3", "k4"], now)
        await permit_store.key_permits_add_many(tx, SCOPE, "emails", {"k1": 1}, now)
        await ready_store.task_ready_insert(tx, k1_low)  # admitted already
        heads = await permit_store.keys_head_pending(
            tx, SCOPE, "emails", {"k1": 2, "k2": 1, "k3": 1, "k4": 1, "k5": 3, "k6": 1}
        )
        admission = await permit_store.keys_admission(
            tx, SCOPE, "emails", ["k1", "k2", "k3", "k5", "k2"]
        )
        return heads, admission

    heads, admission = await db.run(unit)
    # A closed gate's task and a scheduled one are no head; keys without tasks have none.
    assert heads == {"k1": ["t2", "t1"], "k2": ["t4"], "k3": [], "k4": [], "k5": [], "k6": []}
    assert admission == {  # k5 has no permit row: absent
        "k1": KeyAdmission(free=1, head="t2", admitted=1, admitted_first="t1"),
        "k2": KeyAdmission(free=2, head="t4", admitted=0, admitted_first=None),
        "k3": KeyAdmission(free=2, head=None, admitted=0, admitted_first=None),
    }
