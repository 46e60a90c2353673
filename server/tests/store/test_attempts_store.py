"""Conformance: the attempts' store methods, on every dialect."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.pulse.model import Attempt, Task
from orbit_server.pulse.states import AttemptState
from orbit_server.store import Database, Tx
from orbit_server.store import attempts as attempt_store
from orbit_server.store.attempts import AttemptUpdate, attempts_insert
from tests.store.builders import LEASE, insert, lease, task

A = AttemptState


def leased(clock: FakeClock, task_id: str, epoch: int = 1) -> Task:
    """A task as its lease left it (attempt rows need no task row)."""
    return dataclasses.replace(
        task(clock, task_id), lease_epoch=epoch, worker_id="w1", session_id="ses_1",
        node="node-a", lease_expires_at=clock.now() + LEASE,
    )  # fmt: skip


@pytest.mark.covers("attempts_insert", "attempts_update_many", "attempt_get", "attempt_list")
async def test_an_attempt_is_numbered_by_its_lease_and_follows_the_previous_end(
    db: Database, clock: FakeClock
) -> None:
    now = clock.now()
    ended = now + timedelta(seconds=10)  # another node's clock ahead of this one's
    failure = AttemptUpdate("a", 1, A.FAILED, cause="error", started_at=now, ended_at=ended,
                            error={"message": "boom"})  # fmt: skip

    async def unit(tx: Tx) -> None:
        await attempt_store.attempts_insert(tx, [leased(clock, "a"), leased(clock, "b")], now)
        await attempt_store.attempts_update_many(tx, [failure])
        await attempt_store.attempts_update_many(tx, [])
        await attempt_store.attempts_insert(tx, [leased(clock, "a", epoch=2)], now)

    await db.run(unit)

    async def read(tx: Tx) -> tuple[object, ...]:
        return (
            [(a.number, a.state, a.leased_at) for a in await attempt_store.attempt_list(tx, "a")],
            await attempt_store.attempt_get(tx, "a", 1),
            await attempt_store.attempt_get(tx, "a", 3),
            await attempt_store.attempt_get(tx, "b", 1),
        )

    numbers, first, missing, other = await db.read(read)
    assert numbers == [(1, A.FAILED, now), (2, A.LEASED, ended)]
    assert isinstance(first, Attempt) and missing is None
    assert (first.cause, first.error, first.started_at, first.ended_at) == (
        "error", {"message": "boom"}, now, ended,
    )  # fmt: skip
    assert (first.worker_id, first.session_id, first.node) == ("w1", "ses_1", "node-a")
    assert isinstance(other, Attempt) and other.state == A.LEASED
    assert other.lease_expires_at == now + LEASE and other.started_at is None


@pytest.mark.covers(
    "attempts_start_many", "attempts_end_running_many", "attempts_start_and_end_many",
    "attempts_delete_for_tasks",
)  # fmt: skip
async def test_attempts_start_and_end_set_wise_from_the_state_they_are_in(
    db: Database, clock: FakeClock
) -> None:
    now = clock.now()
    ids = ["t1", "t2", "t3", "t4"]
    await db.run(lambda tx: attempt_store.attempts_insert(tx, [leased(clock, t) for t in ids], now))
    later = clock.advance(timedelta(seconds=5))

    async def unit(tx: Tx) -> list[int]:
        await attempt_store.attempts_start_many(tx, ["t1", "t2"], expires_at=later + LEASE, now=now)
        # Each ends only attempts in its own state: t1 (running), then t3 (leased).
        await attempt_store.attempts_end_running_many(tx, ["t1", "t3"], A.SUCCEEDED, "done", later)
        await attempt_store.attempts_start_and_end_many(
            tx, ["t2", "t3"], A.SUCCEEDED, "done", later
        )
        return [
            await attempt_store.attempts_delete_for_tasks(tx, ["t4", "none"]),
            len(await attempt_store.attempt_list(tx, "t4")),
        ]

    assert await db.run(unit) == [1, 0]

    async def read(tx: Tx) -> list[tuple[object, ...]]:
        found = [await attempt_store.attempt_get(tx, t, 1) for t in ("t1", "t2", "t3")]
        return [(a.state, a.cause, a.started_at, a.ended_at, a.lease_expires_at)
                for a in found if a is not None]  # fmt: skip

    assert await db.read(read) == [
        (A.SUCCEEDED, "done", now, later, None),
        (A.RUNNING, None, now, None, later + LEASE),
        (A.SUCCEEDED, "done", later, later, None),
    ]


@pytest.mark.covers("attempts_of_tasks")
async def test_the_attempts_of_many_tasks_come_in_one_read(db: Database, clock: FakeClock) -> None:
    await insert(db, task(clock, "t1"), task(clock, "t2"), task(clock, "t3"))

    async def leased(tx: Tx) -> None:
        await attempts_insert(tx, await lease(tx, clock.now(), "t1", "t2"), clock.now())

    await db.run(leased)
    found = await db.read(lambda tx: attempt_store.attempts_of_tasks(tx, ["t1", "t2", "t3"]))
    assert {t: [a.number for a in rows] for t, rows in found.items()} == {"t1": [1], "t2": [1]}
    assert await db.read(lambda tx: attempt_store.attempts_of_tasks(tx, [])) == {}


@pytest.mark.covers("attempts_progress_set", "attempts_of_tasks")
async def test_progress_is_recorded_on_its_attempt_and_read_with_it(
    db: Database, clock: FakeClock
) -> None:
    now = clock.now()
    later = now + timedelta(seconds=3)
    details = {"done": 40, "total": 100, "stage": "upload", "note": "ünïcode"}

    async def unit(tx: Tx) -> None:
        await attempt_store.attempts_insert(tx, [leased(clock, "a"), leased(clock, "b")], now)
        await attempt_store.attempts_insert(tx, [leased(clock, "a", epoch=2)], now)
        await attempt_store.attempts_progress_set(
            tx, [attempt_store.ProgressReport("a", 1, '{"done": 1}')], now
        )
        await attempt_store.attempts_progress_set(tx, [], now)
        # A later report replaces the earlier one; a report names one attempt only.
        await attempt_store.attempts_progress_set(
            tx,
            [
                attempt_store.ProgressReport("a", 2, '{"done":40,"total":100,"stage":"upload",'
                                                      '"note":"ünïcode"}'),
                attempt_store.ProgressReport("a", 1, '{"done": 2}'),
            ],
            later,
        )  # fmt: skip

    await db.run(unit)

    async def read(tx: Tx) -> dict[str, list[Attempt]]:
        return await attempt_store.attempts_of_tasks(tx, ["a", "b"])

    found = await db.read(read)
    first, second = found["a"]
    assert (first.progress, first.progress_at) == ({"done": 2}, later)
    assert (second.progress, second.progress_at) == (details, later)
    [other] = found["b"]
    assert (other.progress, other.progress_at) == (None, None)
