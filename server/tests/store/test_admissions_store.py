"""Conformance: the admission notes' store methods, on every dialect."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.store import Database, Tx
from orbit_server.store import admissions as admission_store
from orbit_server.store.admissions import AdmissionNote
from tests.store.builders import OTHER, SCOPE


@pytest.mark.covers("admission_note_insert", "admission_note_delete", "admission_notes_older")
async def test_notes_are_read_oldest_first_until_deleted(db: Database, clock: FakeClock) -> None:
    first = clock.now()

    async def write(tx: Tx) -> None:
        await admission_store.admission_note_insert(tx, "n1", SCOPE, "emails", ["b", "a"], first)
        clock.advance(timedelta(seconds=1))
        await admission_store.admission_note_insert(tx, "n2", OTHER, "reports", ["c"], clock.now())
        clock.advance(timedelta(seconds=1))
        await admission_store.admission_note_insert(tx, "n3", SCOPE, "emails", ["d"], clock.now())

    await db.run(write)
    second = first + timedelta(seconds=1)

    async def older(before: datetime, limit: int = 10) -> list[str]:
        notes = await db.read(
            lambda tx: admission_store.admission_notes_older(tx, before, limit=limit)
        )
        return [n.id for n in notes]

    assert await older(second) == ["n1", "n2"]  # written at or before
    assert await older(clock.now(), limit=1) == ["n1"]
    [note] = await db.read(lambda tx: admission_store.admission_notes_older(tx, first, limit=5))
    assert note == AdmissionNote("n1", SCOPE, "emails", ("a", "b"), first)  # keys in order

    async def delete(tx: Tx) -> list[bool]:
        return [
            await admission_store.admission_note_delete(tx, "n1"),
            await admission_store.admission_note_delete(tx, "n1"),
        ]

    assert await db.run(delete) == [True, False]
    assert await older(clock.now()) == ["n2", "n3"]
