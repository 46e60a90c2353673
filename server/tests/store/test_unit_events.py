"""The unit of work publishes its domain events after COMMIT, and only the committed run's."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from orbit_server.store import Database, Tx
from orbit_server.store.base import TransientConflict


@dataclass(frozen=True)
class Happened:
    what: str


async def test_events_reach_the_bus_after_the_commit_in_order(db: Database) -> None:
    heard: list[str] = []
    db.bus.subscribe(Happened, lambda e: heard.append(e.what))

    async def unit(tx: Tx) -> int:
        tx.publish(Happened("first"))
        tx.publish(Happened("second"))
        assert heard == []  # not while the transaction is open
        return 7

    assert await db.run(unit) == 7
    assert heard == ["first", "second"]


async def test_a_unit_that_raises_publishes_nothing(db: Database) -> None:
    heard: list[str] = []
    db.bus.subscribe(Happened, lambda e: heard.append(e.what))

    async def unit(tx: Tx) -> None:
        tx.publish(Happened("rolled back"))
        raise LookupError("the unit's own error")

    with pytest.raises(LookupError):
        await db.run(unit)
    assert heard == []


async def test_only_the_run_that_committed_publishes(db: Database) -> None:
    heard: list[str] = []
    db.bus.subscribe(Happened, lambda e: heard.append(e.what))
    runs = 0

    async def unit(tx: Tx) -> None:
        nonlocal runs
        runs += 1
        tx.publish(Happened(f"run {runs}"))
        if runs == 1:
            raise TransientConflict("a deadlock: the whole unit runs again")

    await db.run(unit)
    assert runs == 2
    assert heard == ["run 2"]


async def test_async_handlers_are_awaited_and_failures_stay_with_the_handler(
    db: Database,
) -> None:
    heard: list[str] = []

    async def slow(event: Happened) -> None:
        heard.append(f"awaited {event.what}")

    def broken(event: Happened) -> None:
        raise RuntimeError("a handler's bug")

    db.bus.subscribe(Happened, broken)
    db.bus.subscribe(Happened, slow)

    async def unit(tx: Tx) -> str:
        tx.publish(Happened("x"))
        return "committed"

    assert await db.run(unit) == "committed"  # the commit's answer is not lost to the bug
    assert heard == ["awaited x"]
