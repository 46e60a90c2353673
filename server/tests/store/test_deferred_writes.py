"""The storage seam's deferred writes (``Tx.defer``), on every dialect: a write whose count the
unit does not read goes out with the unit's next statement or before its commit — seen by
what follows it in the unit, committed with it, and failing it when it fails."""

from __future__ import annotations

import pytest

from orbit_server.clock import FakeClock
from orbit_server.store import Database, Tx
from orbit_server.store import queues as queue_store
from orbit_server.store.base import DuplicateKey, scope_params
from orbit_server.store.mysql_backend import TEXT_BATCH_CHARS
from tests.store.builders import SCOPE

# Values the text protocol must escape exactly as a prepared statement would pass them.
AWKWARD = ["it's", 'a "quote"', "back\\slash", "100% of %s", "ünïcödé ✓", "semi;colon -- no"]


def queue_row(name: str, clock: FakeClock) -> dict[str, object]:
    return {**scope_params(SCOPE), "name": name, "now": clock.now()}


async def names(db: Database) -> list[str]:
    queues = await db.read(lambda tx: queue_store.queue_list(tx, SCOPE, limit=20_000))
    return [q.name for q in queues]


async def test_deferred_writes_are_seen_by_the_next_statement_and_committed(
    db: Database, clock: FakeClock
) -> None:
    async def unit(tx: Tx) -> object:
        tx.defer("queue_insert", queue_row(AWKWARD[0], clock))
        tx.defer_many("queue_insert", [queue_row(n, clock) for n in AWKWARD[1:]])
        seen = await queue_store.queue_get(tx, SCOPE, AWKWARD[3])  # sent with the deferred
        tx.defer("queue_add_counts", {**queue_row(AWKWARD[4], clock), "pending": 3, "active": 0})
        return seen

    seen = await db.run(unit)
    assert seen is not None and seen.name == AWKWARD[3]
    assert sorted(await names(db)) == sorted(AWKWARD)
    queue = await db.read(lambda tx: queue_store.queue_get(tx, SCOPE, AWKWARD[4]))
    assert queue is not None and queue.pending == 3  # the last one went out before the commit
    assert queue.created_at == clock.now()  # times pass through the text protocol exactly


async def test_a_failing_deferred_write_fails_its_unit_and_nothing_is_committed(
    db: Database, clock: FakeClock
) -> None:
    await db.run(lambda tx: queue_store.queue_ensure(tx, SCOPE, "taken", clock.now()))

    async def unit(tx: Tx) -> None:
        tx.defer("queue_insert", queue_row("taken", clock))  # a duplicate
        # queue_ensure answers a duplicate key of its own insert with False: the deferred
        # write's must not pass for it, or the unit would commit without that write.
        await queue_store.queue_ensure(tx, SCOPE, "fresh", clock.now())

    with pytest.raises((RuntimeError, DuplicateKey)):
        await db.run(unit)

    async def last(tx: Tx) -> None:
        await queue_store.queue_ensure(tx, SCOPE, "other", clock.now())
        tx.defer("queue_insert", queue_row("taken", clock))  # fails at the unit's end

    with pytest.raises(DuplicateKey):
        await db.run(last)
    assert await names(db) == ["taken"]


async def test_many_deferred_rows_go_out_whatever_their_size(
    db: Database, clock: FakeClock
) -> None:
    long = "q" * 100
    rows = [queue_row(f"{long}{i:06d}", clock) for i in range(16_000)]
    one_by_one = rows[:12_000]  # small statements, sent as text: several round trips' worth
    assert sum(len(str(r["name"])) for r in one_by_one) > TEXT_BATCH_CHARS

    async def unit(tx: Tx) -> int:
        for row in one_by_one:
            tx.defer("queue_insert", row)
        tx.defer_many("queue_insert", rows[12_000:])  # large statements: prepared, in order
        return await tx.execute("queue_add_counts", {**rows[-1], "pending": 1, "active": 0})

    assert await db.run(unit) == 1  # the statement after them counts only its own rows
    assert len(await names(db)) == len(rows)
