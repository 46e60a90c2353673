"""Conformance: the claim range's store methods (``task_ready`` rows, a claim's reads of them,
the fairness cursors), on every dialect."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable
from datetime import timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.pulse.model import Queue
from orbit_server.pulse.states import TaskState
from orbit_server.store import Database, Tx
from orbit_server.store import claim_range as ready_store
from orbit_server.store import queues as queue_store
from orbit_server.store import tasks as task_store
from orbit_server.store.claim_range import KeySpan
from tests.store.builders import OTHER, SCOPE, task


async def ready(tx: Tx, keys: list[str]) -> set[str]:
    return await ready_store.ready_of_keys(tx, SCOPE, "emails", keys)


@pytest.mark.covers(
    "task_ready_insert", "task_ready_insert_many", "ready_insert_tasks", "task_ready_delete",
    "ready_delete_many", "ready_exists", "ready_of_keys", "queue_oldest_ready_at",
)  # fmt: skip
async def test_tasks_enter_and_leave_the_claim_range(db: Database, clock: FakeClock) -> None:
    first = task(clock, "t1", concurrency_key="a")
    clock.advance(1000)
    rest = [task(clock, f"t{i}", concurrency_key="b") for i in (2, 3, 4)]
    scheduled = dataclasses.replace(
        task(clock, "t5", concurrency_key="b"), state=TaskState.SCHEDULED
    )

    async def fill(tx: Tx) -> tuple[object, ...]:
        empty = (
            await ready_store.ready_exists(tx, SCOPE, "emails"),
            await ready_store.queue_oldest_ready_at(tx, SCOPE, "emails"),
        )
        await task_store.tasks_insert_many(tx, [first, *rest, scheduled])
        await ready_store.task_ready_insert(tx, first)
        await ready_store.task_ready_insert_many(tx, rest[:1])
        await ready_store.task_ready_insert_many(tx, [])
        # Read from the rows: only pending tasks go in.
        inserted = await ready_store.ready_insert_tasks(tx, ["t3", "t4", "t5"])
        return empty, inserted, await ready_store.ready_insert_tasks(tx, [])

    assert await db.run(fill) == ((False, None), 2, 0)

    async def read(tx: Tx) -> tuple[object, ...]:
        return (
            await ready_store.ready_exists(tx, SCOPE, "emails"),
            await ready_store.ready_exists(tx, OTHER, "emails"),
            await ready(tx, ["b", "a", "none"]),
            await ready(tx, []),
            await ready_store.queue_oldest_ready_at(tx, SCOPE, "emails"),
        )

    assert await db.read(read) == (True, False, {"t1", "t2", "t3", "t4"}, set(), first.run_at)

    async def empty(tx: Tx) -> tuple[object, ...]:
        return (
            await ready_store.task_ready_delete(tx, "t1"),
            await ready_store.task_ready_delete(tx, "t1"),
            await ready_store.queue_oldest_ready_at(tx, SCOPE, "emails"),
            await ready_store.ready_delete_many(tx, ["t2", "t3", "t9"]),
            await ready_store.ready_delete_many(tx, []),
            await ready(tx, ["a", "b"]),
        )

    assert await db.run(empty) == (True, False, rest[0].run_at, None, None, {"t4"})


@pytest.mark.covers("gate_park")
async def test_a_closed_gates_unkeyed_tasks_leave_the_range_and_come_back(
    db: Database, clock: FakeClock
) -> None:
    gated = [task(clock, f"g{i}", gate_id="gate_1") for i in range(3)]
    keyed = task(clock, "k1", gate_id="gate_1", concurrency_key="a")  # admitted by its key
    other = task(clock, "o1", gate_id="gate_2")

    async def unit(tx: Tx) -> tuple[list[int], set[str]]:
        await task_store.tasks_insert_many(tx, [*gated, keyed, other])
        await ready_store.task_ready_insert_many(tx, [gated[0], keyed, other])
        counts = [
            await ready_store.gate_park(tx, "gate_1", open_=False),
            await ready_store.gate_park(tx, "gate_1", open_=True),
        ]
        rows = await ready_store.ready_candidates(tx, SCOPE, "emails", "send", limit=10)
        return counts, {r.task_id for r in rows}

    counts, rows = await db.run(unit)
    assert counts == [2, 3]  # g0 and k1 out; g0, g1, g2 in (keyed tasks wait for their key)
    assert rows == {"g0", "g1", "g2", "o1"}


@pytest.mark.covers("ready_candidates")
async def test_candidates_come_in_claim_order_per_key_and_handler_version(
    db: Database, clock: FakeClock
) -> None:
    specs = [("c1", "x", 0, None), ("c2", "x", 5, None), ("c3", "y", 0, "v2"),
             ("c4", "y", 1, "v1"), ("c5", "z", 0, None)]  # fmt: skip
    rows = []
    for task_id, key, priority, version in specs:
        rows.append(task(clock, task_id, fairness_key=key, priority=priority,
                         handler_version=version))  # fmt: skip
        clock.advance(timedelta(seconds=1))
    await db.run(lambda tx: ready_store.task_ready_insert_many(tx, rows))

    async def ids(
        limit: int, fairness_keys: list[str] | None = None, versions: tuple[str, ...] = ()
    ) -> list[str]:
        async def unit(tx: Tx) -> list[str]:
            found = await ready_store.ready_candidates(
                tx, SCOPE, "emails", "send", limit=limit, fairness_keys=fairness_keys,
                versions=versions,
            )  # fmt: skip
            return [c.task_id for c in found]

        return await db.run(unit)

    assert await ids(limit=10) == ["c2", "c4", "c1", "c3", "c5"]
    assert await ids(limit=2) == ["c2", "c4"]
    assert await ids(limit=10, versions=("v2",)) == ["c2", "c1", "c3", "c5"]
    assert sorted(await ids(limit=1, fairness_keys=["y", "x"])) == ["c2", "c4"]  # one per key
    assert sorted(await ids(limit=2, fairness_keys=["x"])) == ["c1", "c2"]
    assert await ids(limit=1, fairness_keys=[]) == []
    [first] = await db.run(
        lambda tx: ready_store.ready_candidates(tx, SCOPE, "emails", "send", limit=1)
    )
    assert (first.fairness_key, first.priority, first.handler_version) == ("x", 5, None)
    assert first.run_at == rows[1].run_at


@pytest.mark.covers("claim_outlook", "ready_fairness_keys", "fairness_cursor_set")
async def test_the_outlook_and_the_fairness_rotation_of_a_queues_types(
    db: Database, clock: FakeClock
) -> None:
    now = clock.now()
    keys = ["c", "a", "", "b"]
    rows = [task(clock, f"s{i}", fairness_key=key or None) for i, key in enumerate(keys)]
    rows += [task(clock, "b1", type="bill", fairness_key="m")]

    async def setup(tx: Tx) -> None:
        await queue_store.queue_ensure(tx, SCOPE, "emails", now)
        await ready_store.task_ready_insert_many(tx, rows)

    await db.run(setup)

    async def outlook(tx: Tx) -> tuple[Queue | None, dict[str, KeySpan]]:
        return await ready_store.claim_outlook(tx, SCOPE, "emails", ["send", "bill", "idle"])

    queue, spans = await db.read(outlook)
    assert queue is not None and queue.name == "emails"
    assert spans == {"send": KeySpan("", "c", None), "bill": KeySpan("m", "m", None)}
    missing = await db.read(lambda tx: ready_store.claim_outlook(tx, SCOPE, "none", ["send"]))
    assert missing == (None, {})

    async def fair(limit: int, start_after: str | None) -> list[str]:
        return await db.read(
            lambda tx: ready_store.ready_fairness_keys(
                tx, SCOPE, "emails", "send", limit=limit, start_after=start_after
            )
        )

    assert await fair(10, None) == ["", "a", "b", "c"]
    assert await fair(10, "b") == ["c", "", "a", "b"]  # wraps around
    assert await fair(2, "a") == ["b", "c"]
    assert await fair(10, "zzz") == ["", "a", "b", "c"]

    async def rotate(tx: Tx) -> None:
        await ready_store.fairness_cursor_set(tx, SCOPE, "emails", "send", "a", now)
        await ready_store.fairness_cursor_set(tx, SCOPE, "emails", "send", "b", now)  # replaces

    await db.run(rotate)
    _, spans = await db.read(outlook)
    assert spans["send"] == KeySpan("", "c", "b") and spans["bill"].after is None


@pytest.mark.covers("ready_groups")
async def test_claimable_work_is_grouped_by_queue_type_and_version(
    db: Database, clock: FakeClock
) -> None:
    oldest = task(clock, "t1")
    clock.advance(1000)
    rows = [
        oldest,
        task(clock, "t2"),
        task(clock, "t3", handler_version="2"),
        task(clock, "t4", queue="reports", type="build"),
        task(clock, "t5", scope=OTHER),
    ]

    async def fill(tx: Tx) -> None:
        for row in rows:
            await ready_store.task_ready_insert(tx, row)

    await db.run(fill)
    groups = await db.read(lambda tx: ready_store.ready_groups(tx, SCOPE))
    found = {(g.queue, g.type, g.handler_version): (g.count, g.oldest_run_at) for g in groups}
    assert found == {
        ("emails", "send", None): (2, oldest.run_at),
        ("emails", "send", "2"): (1, rows[2].run_at),
        ("reports", "build", None): (1, rows[3].run_at),
    }
    one = await db.read(lambda tx: ready_store.ready_groups(tx, SCOPE, queue="reports"))
    assert [(g.queue, g.count) for g in one] == [("reports", 1)]


@pytest.mark.covers("ready_heads", "ready_count_upto")
async def test_heads_step_through_types_and_priorities_and_counts_stop(
    db: Database, clock: FakeClock
) -> None:
    rows = []
    for i in range(6):
        rows.append(task(clock, f"a{i}", type="b", priority=i % 2,
                         handler_version=None if i < 4 else "1"))  # fmt: skip
        clock.advance(1000)
    rows.append(task(clock, "c1", type="a", priority=-5))
    rows.append(task(clock, "x1", queue="other"))

    async def fill(tx: Tx) -> None:
        for row in rows:
            await ready_store.task_ready_insert(tx, row)

    await db.run(fill)
    heads = await db.read(lambda tx: ready_store.ready_heads(tx, SCOPE, "emails"))
    assert [(h.type, h.priority, h.run_at) for h in heads] == [
        ("a", -5, rows[6].run_at),
        ("b", 1, rows[1].run_at),
        ("b", 0, rows[0].run_at),
    ]
    assert (
        await db.read(lambda tx: ready_store.ready_heads(tx, SCOPE, "emails", most=2)) == heads[:2]
    )
    assert await db.read(lambda tx: ready_store.ready_heads(tx, OTHER, "emails")) == []

    async def counts(tx: Tx) -> tuple[int, ...]:
        def upto(n: int, versions: list[str] | None = None) -> Awaitable[int]:
            return ready_store.ready_count_upto(tx, SCOPE, "emails", "b", upto=n,
                                                not_versions=versions)  # fmt: skip

        return (
            await upto(100), await upto(4), await upto(100, ["2"]), await upto(100, ["1"]),
            await upto(100, []),
        )  # fmt: skip

    assert await db.read(counts) == (6, 4, 2, 0, 2)
