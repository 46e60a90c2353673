"""Conformance: the gates' store methods, on every dialect."""

from __future__ import annotations

from datetime import timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.pulse.model import Gate
from orbit_server.store import Database, Tx
from orbit_server.store import gates as gate_store
from tests.store.builders import OTHER, SCOPE


@pytest.mark.covers("gate_create", "gate_get", "gate_set", "gates_open", "gate_delete")
async def test_a_gate_opens_and_closes_with_a_new_version_each_time(
    db: Database, clock: FakeClock
) -> None:
    start = clock.now()

    async def create(tx: Tx) -> None:
        await gate_store.gate_create(tx, SCOPE, "g1", start)
        await gate_store.gate_create(tx, SCOPE, "g2", start)

    await db.run(create)
    later = clock.advance(timedelta(seconds=1))

    async def toggle(tx: Tx) -> list[bool]:
        return [
            await gate_store.gate_set(tx, SCOPE, "g1", open_=False, now=later),
            await gate_store.gate_set(tx, OTHER, "g2", open_=False, now=later),  # not its scope
            await gate_store.gate_set(tx, SCOPE, "none", open_=False, now=later),
        ]

    assert await db.run(toggle) == [True, False, False]

    async def read(tx: Tx) -> tuple[object, ...]:
        return (
            await gate_store.gate_get(tx, SCOPE, "g1"),
            await gate_store.gate_get(tx, SCOPE, "g1", lock=True),
            await gate_store.gate_get(tx, OTHER, "g1"),
            await gate_store.gates_open(tx, ["g2", "g1", "none", "g2"]),
            await gate_store.gates_open(tx, []),
        )

    g1, locked, foreign, open_, none = await db.run(read)
    assert g1 == locked == Gate("g1", SCOPE, open=False, version=1, created_at=start,
                                updated_at=later)  # fmt: skip
    assert foreign is None
    assert open_ == {"g2": True, "g1": False, "none": False} and none == {}  # missing: closed
    await db.run(lambda tx: gate_store.gate_set(tx, SCOPE, "g1", open_=True, now=later))
    reopened = await db.read(lambda tx: gate_store.gate_get(tx, SCOPE, "g1"))
    assert reopened is not None and (reopened.open, reopened.version) == (True, 2)
    await db.run(lambda tx: gate_store.gate_delete(tx, "g1"))
    assert await db.read(lambda tx: gate_store.gate_get(tx, SCOPE, "g1")) is None
    assert await db.read(lambda tx: gate_store.gates_open(tx, ["g1", "g2"])) == {
        "g1": False, "g2": True,
    }  # fmt: skip
