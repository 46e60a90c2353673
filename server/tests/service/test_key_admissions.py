"""A submit with many concurrency keys admits them after its commit, in short transactions,
and leaves a note that recovery finishes if the node stops first (decision 0012). The
deferred way is forced here on every dialect (by default SQLite admits in the submit)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.errors import Unavailable
from orbit_server.pulse import admission
from orbit_server.runtime.node import Node
from orbit_server.store import Tx
from orbit_server.store import admissions as astore
from orbit_server.store import claim_range as ready_store
from tests.conftest import SCOPE
from tests.service.test_worker import claim, spec, submit


async def admitted(node: Node, keys: list[str]) -> set[str]:
    return await node.db.read(lambda tx: ready_store.ready_of_keys(tx, SCOPE, "emails", keys))


async def notes(node: Node, clock: FakeClock) -> list[astore.AdmissionNote]:
    later = clock.now() + timedelta(days=1)
    return await node.db.read(lambda tx: astore.admission_notes_older(tx, later, limit=100))


@pytest.mark.parametrize("deferred", [True, False])
async def test_a_submit_of_many_keys_admits_each_keys_first_task(
    node: Node, clock: FakeClock, deferred: bool
) -> None:
    node.tasks.admissions.defer_over = 0 if deferred else None
    [busy_first] = await submit(node, 1, concurrency_key="busy")
    [lease] = await claim(node)
    assert lease.task.id == busy_first
    keys = [f"k{i:03}" for i in range(admission.CHUNK + 30)]  # more than one transaction
    specs = [spec(concurrency_key=key) for _ in range(3) for key in [*keys, "busy"]]
    done = await node.tasks.submit_many(SCOPE, specs)
    firsts = {s.task.concurrency_key: s.task.id for s in reversed(done)}
    assert await admitted(node, [*keys, "busy"]) == {firsts[key] for key in keys}
    assert await notes(node, clock) == []  # done with: no note left
    leases = await claim(node, free=1000)
    assert {lease.task.id for lease in leases} == {firsts[key] for key in keys}


async def test_keys_a_submit_could_not_admit_are_admitted_by_recovery(
    node: Node, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    node.tasks.admissions.defer_over = 0

    async def database_gone(*args: object, **kwargs: object) -> None:
        raise Unavailable("the database is unavailable")

    with monkeypatch.context() as patch:
        patch.setattr(admission, "admit_keys", database_gone)
        ids = await submit(node, 3, concurrency_key="a")  # answered: the submit committed
    assert await admitted(node, ["a"]) == set() and await claim(node) == []
    [left] = await notes(node, clock)
    assert (left.queue, left.keys) == ("emails", ("a",))

    assert await node.tasks.admissions.finish_stale() == 0  # its node may still be at it
    clock.advance(timedelta(seconds=admission.STALE_S))
    assert await node.tasks.admissions.finish_stale() == 1
    assert await admitted(node, ["a"]) == {ids[0]}
    assert await notes(node, clock) == []
    [lease] = await claim(node)
    assert lease.task.id == ids[0]


async def test_a_note_finished_twice_admits_once(node: Node, clock: FakeClock) -> None:
    """A slow node and recovery may both admit one note's keys: the second changes nothing."""
    ids = await submit(node, 2, concurrency_key="a")

    async def unit(tx: Tx) -> astore.AdmissionNote:
        return await node.tasks.admissions.note(tx, SCOPE, "emails", ["a"])

    note = await node.db.run(unit)
    await node.tasks.admissions.finish([note])
    clock.advance(timedelta(seconds=admission.STALE_S))
    assert await node.tasks.admissions.finish_stale() == 0  # finish deleted the note
    await node.tasks.admissions.finish([note])  # and again: nothing to do, nothing fails
    assert await admitted(node, ["a"]) == {ids[0]}
