"""Conformance: the tasks' store methods (their reads, locks and every write of a task row), on
every dialect."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.pulse.model import Owner, ResultEvent, Task
from orbit_server.pulse.states import AttemptState, TaskState
from orbit_server.store import Database, Tx
from orbit_server.store import attempts as attempt_store
from orbit_server.store import task_events as event_store
from orbit_server.store import tasks as task_store
from orbit_server.store import workflows as workflow_store
from orbit_server.store.base import DuplicateKey
from orbit_server.store.tasks import (
    IDS_PER_READ,
    HeldLease,
    LeaseAdoption,
    Successes,
    TaskMove,
    TaskStart,
)
from orbit_server.weave.model import Workflow
from orbit_server.weave.states import WorkflowState
from tests.store.builders import LEASE, OTHER, SCOPE, grant, insert, lease, task

S = TaskState


async def get(db: Database, task_id: str) -> Task:
    found = await db.read(lambda tx: task_store.task_get(tx, SCOPE, task_id))
    assert found is not None
    return found


async def states(db: Database, *task_ids: str) -> list[TaskState]:
    return [(await get(db, t)).state for t in task_ids]


def result_event(t: Task, seq: int, state: TaskState, event_id: str | None = None) -> ResultEvent:
    return ResultEvent(
        id=event_id or f"evt_{t.id}_{seq}", scope=t.scope, task_id=t.id, attempt=1, state=state,
        owner_kind=t.owner_kind, owner_id=t.owner_id, created_at=t.created_at, seq=seq,
    )  # fmt: skip


@pytest.mark.covers(
    "task_insert", "task_get", "task_get_by_idempotency_key", "tasks_get_many",
    "tasks_insert_many", "task_insert_leased",
)  # fmt: skip
async def test_tasks_round_trip_with_every_field(db: Database, clock: FakeClock) -> None:
    full = task(
        clock, "t1", params={"user": 42, "tags": ["a", "b"], "nested": {"x": 1.5}},
        idempotency_key="welcome-42", priority=7, concurrency_key="user-42",
        fairness_key="shop-7", handler_version="2", labels={"team": "growth"},
        owner=Owner("workflow", "wf_1", "send"),
        traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
    )  # fmt: skip
    many = [task(clock, f"m{i}", params={"i": i}) for i in range(3)]
    now = clock.now()
    direct = dataclasses.replace(
        task(clock, "d1"), lease_token="tok_d", lease_expires_at=now + LEASE,
        session_id="ses_1", node="node-a", worker_id="w1",
    )  # fmt: skip

    async def unit(tx: Tx) -> tuple[object, ...]:
        await task_store.task_insert(tx, full)
        await task_store.tasks_insert_many(tx, many)
        await task_store.tasks_insert_many(tx, [])
        await task_store.task_insert_leased(tx, direct)
        return (
            await task_store.task_get(tx, SCOPE, "t1"),
            await task_store.task_get(tx, SCOPE, "t1", lock=True),
            await task_store.task_get(tx, OTHER, "t1"),
            await task_store.task_get_by_idempotency_key(tx, SCOPE, "welcome-42"),
            await task_store.task_get_by_idempotency_key(tx, OTHER, "welcome-42"),
            await task_store.tasks_get_many(tx, ["m2", "missing", "m0", "m1"]),
            await task_store.tasks_get_many(tx, []),
            await task_store.task_get(tx, SCOPE, "d1"),
        )

    found, locked, foreign, by_key, foreign_key, got, none, leased = await db.run(unit)
    assert found == full and locked == full and by_key == full
    assert foreign is None and foreign_key is None
    assert got == [many[2], many[0], many[1]] and none == []
    assert leased == dataclasses.replace(direct, state=S.LEASED, lease_epoch=1)
    await insert(db, task(clock, "o1", OTHER, idempotency_key="welcome-42"))  # another scope
    with pytest.raises(DuplicateKey):
        await insert(db, task(clock, "t2", idempotency_key="welcome-42"))


@pytest.mark.covers("task_list")
async def test_task_lists_page_newest_first_by_filter(db: Database, clock: FakeClock) -> None:
    tasks = [task(clock, f"t{i}", queue="a" if i % 2 else "b") for i in range(6)]
    tasks[5] = dataclasses.replace(tasks[5], state=S.SCHEDULED)
    await insert(db, *tasks, task(clock, "x9", OTHER))

    async def ids(
        limit: int,
        before: str = task_store.LAST,
        queue: str | None = None,
        state: str | None = None,
    ) -> list[str]:
        found = await db.read(
            lambda tx: task_store.task_list(
                tx, SCOPE, limit=limit, before=before, queue=queue, state=state
            )
        )
        return [t.id for t in found]

    assert await ids(limit=3) == ["t5", "t4", "t3"]
    assert await ids(limit=3, before="t3") == ["t2", "t1", "t0"]
    assert await ids(limit=10, queue="a") == ["t5", "t3", "t1"]
    assert await ids(limit=10, state="scheduled") == ["t5"]
    assert await ids(limit=10, queue="a", state="pending") == ["t3", "t1"]
    assert await ids(limit=10, queue="a", state="pending", before="t3") == ["t1"]


@pytest.mark.covers(
    "tasks_in_states", "queue_state_counts", "queue_pending_keys", "gate_pending_keys",
    "gate_pending_queues",
)  # fmt: skip
async def test_reads_of_tasks_by_state_key_and_gate(db: Database, clock: FakeClock) -> None:
    await insert(
        db,
        task(clock, "p1", concurrency_key="a"),
        task(clock, "p2", concurrency_key="b", gate_id="g1"),
        task(clock, "p3", gate_id="g1"),
        task(clock, "p4", concurrency_key="a", queue="reports", gate_id="g1"),
        dataclasses.replace(
            task(clock, "s1", concurrency_key="c", gate_id="g1"), state=S.SCHEDULED
        ),
    )
    many = [f"x{i:04}" for i in range(IDS_PER_READ)]  # more ids than one read takes

    async def read(tx: Tx) -> tuple[object, ...]:
        return (
            sorted(
                await task_store.tasks_in_states(
                    tx, ["s1", "p1", "p2", *many], ["scheduled", "pending"]
                )
            ),
            await task_store.tasks_in_states(tx, ["s1", "p1"], ["running"]),
            await task_store.queue_state_counts(tx, SCOPE, "emails"),
            await task_store.queue_state_counts(tx, OTHER, "emails"),
            await task_store.queue_pending_keys(tx, SCOPE, "emails"),
            await task_store.gate_pending_keys(tx, "g1"),
            await task_store.gate_pending_queues(tx, "g1"),
        )

    in_states, running, counts, foreign, keys, gate_keys, gate_queues = await db.read(read)
    assert in_states == ["p1", "p2", "s1"] and running == []
    assert counts == {"pending": 3, "scheduled": 1} and foreign == {}
    assert keys == ["a", "b"]
    assert gate_keys == [(SCOPE, "emails", "b"), (SCOPE, "reports", "a")]
    assert gate_queues == [(SCOPE, "emails")]


@pytest.mark.covers(
    "tasks_lease_many", "session_leases", "task_lock_fenced", "tasks_lock_many",
    "tasks_lock_many_in", "task_adopt", "task_set_running", "tasks_start_many",
    "tasks_renew_many", "leases_expired",
)  # fmt: skip
async def test_a_lease_is_fenced_moved_started_renewed_and_found_expired(
    db: Database, clock: FakeClock
) -> None:
    await insert(db, *(task(clock, f"t{i}") for i in (1, 2, 3)))
    await insert(db, dataclasses.replace(task(clock, "s1"), state=S.SCHEDULED))
    now = clock.now()

    async def take(tx: Tx) -> list[tuple[str, TaskState, int, str | None]]:
        leased = await lease(tx, now, "t1", "t2", "s1")
        await attempt_store.attempts_insert(tx, [t for t in leased if t.state == S.LEASED], now)
        assert await task_store.tasks_lease_many(tx, [], grant(now), now) == []
        return [(t.id, t.state, t.lease_epoch, t.lease_token) for t in leased]

    assert await db.run(take) == [
        ("t1", S.LEASED, 1, "tok_1"), ("t2", S.LEASED, 1, "tok_1"), ("s1", S.SCHEDULED, 0, None),
    ]  # fmt: skip

    async def fenced(tx: Tx) -> tuple[object, ...]:
        return (
            await task_store.task_lock_fenced(tx, "t1", 1, "tok_1", "ses_1"),
            await task_store.task_lock_fenced(tx, "t1", 1, "tok_other", "ses_1"),
            await task_store.task_lock_fenced(tx, "t1", 1, "tok_1", "ses_other"),
            await task_store.tasks_lock_many(tx, ["t2", "t1", "t2", "none"]),
            await task_store.tasks_lock_many_in(tx, SCOPE, ["t1", "none"]),
            await task_store.tasks_lock_many_in(tx, OTHER, ["t1"]),
            await task_store.tasks_lock_many(tx, []),
            await task_store.tasks_lock_many_in(tx, SCOPE, []),
            sorted(await task_store.session_leases(tx, "ses_1"), key=lambda h: h.task_id),
        )

    one, bad_token, bad_session, locked, mine, foreign, none, none_in, held = await db.run(fenced)
    assert isinstance(one, Task) and one.id == "t1" and bad_token is None and bad_session is None
    assert isinstance(locked, dict) and sorted(locked) == ["t1", "t2"]
    assert locked["t1"].lease_token == "tok_1" and locked["t1"].state == S.LEASED
    assert isinstance(mine, dict) and list(mine) == ["t1"] and foreign == none == none_in == {}
    assert held == [
        HeldLease("t1", 1, "tok_1", "leased"), HeldLease("t2", 1, "tok_1", "leased"),
    ]  # fmt: skip

    def adoption(token: str) -> LeaseAdoption:
        return LeaseAdoption("t1", 1, token, session_id="ses_2", node="node-b", worker_id="w2")

    assert await db.run(lambda tx: task_store.task_adopt(tx, adoption("tok_1"), now))
    assert not await db.run(lambda tx: task_store.task_adopt(tx, adoption("tok_other"), now))
    ran_out = now + LEASE  # the lease ended: nothing to continue
    assert not await db.run(lambda tx: task_store.task_adopt(tx, adoption("tok_1"), ran_out))
    moved = await db.read(lambda tx: task_store.session_leases(tx, "ses_2"))
    assert [h.task_id for h in moved] == ["t1"]
    assert (await get(db, "t1")).node == "node-b"

    later = clock.advance(timedelta(seconds=1))
    start = TaskStart("t1", 1, "tok_1", expires_at=later + LEASE, deadline_at=later + 2 * LEASE)
    short = TaskStart("t1", 1, "tok_1", expires_at=later + LEASE, deadline_at=later + LEASE / 3)

    async def begin(tx: Tx) -> list[bool]:
        return [
            await task_store.task_set_running(tx, dataclasses.replace(start, token="x"), later),
            await task_store.task_set_running(tx, short, later),
            await task_store.task_set_running(tx, start, later),  # running already
        ]

    assert await db.run(begin) == [False, True, False]

    async def start_many(tx: Tx) -> None:
        deadline = later + 2 * LEASE
        for ids in (["t2", "t3"], []):
            await task_store.tasks_start_many(
                tx, ids, expires_at=later + LEASE, deadline_at=deadline, now=later
            )

    await db.run(start_many)
    t1, t2, t3 = await get(db, "t1"), await get(db, "t2"), await get(db, "t3")
    assert (t1.state, t1.attempts, t1.lease_expires_at) == (S.RUNNING, 1, later + LEASE / 3)
    assert (t2.state, t2.attempts, t2.deadline_at) == (S.RUNNING, 1, later + 2 * LEASE)
    assert t3.state == S.PENDING  # never leased: not started
    attempt = await db.read(lambda tx: attempt_store.attempt_get(tx, "t2", 1))
    assert attempt is not None and (attempt.state, attempt.started_at) == ("running", later)

    renew_to = later + LEASE * 1.5
    await db.run(lambda tx: task_store.tasks_renew_many(tx, ["t2", "t1", "t2"], renew_to, later))
    await db.run(lambda tx: task_store.tasks_renew_many(tx, [], renew_to, later))
    assert (await get(db, "t1")).lease_expires_at == later + LEASE / 3  # its deadline
    assert (await get(db, "t2")).lease_expires_at == renew_to

    async def expired(at: datetime) -> list[str]:
        found = await db.read(lambda tx: task_store.leases_expired(tx, at, limit=10))
        assert all(scope == SCOPE for _, scope in found)
        return [task_id for task_id, _ in found]

    assert await expired(later + LEASE / 2) == ["t1"]
    assert await expired(later + LEASE * 2) == ["t1", "t2"]


@pytest.mark.covers(
    "tasks_succeed_many", "tasks_finish", "tasks_return_pending", "tasks_resolve",
    "tasks_reopen", "task_event_seqs_advance",
)  # fmt: skip
async def test_guarded_moves_change_only_rows_still_as_their_callers_read_them(
    db: Database, clock: FakeClock
) -> None:
    await insert(db, *(task(clock, t) for t in ("r1", "r2", "r3", "l1", "l2")))
    now = clock.now()

    async def setup(tx: Tx) -> None:
        leased = await lease(tx, now, "r1", "r2", "r3", "l1", "l2")
        await attempt_store.attempts_insert(tx, leased, now)
        await task_store.tasks_start_many(
            tx, ["r1", "r2", "r3"], expires_at=now + LEASE, deadline_at=now + LEASE, now=now
        )

    await db.run(setup)
    done = clock.advance(timedelta(seconds=5))
    running = Successes(["r1", "r2"], [{"ok": 1}, None], from_state="running",
                        attempt_state="succeeded", cause="completed")  # fmt: skip
    eager = Successes(["l2"], ["early"], from_state="leased", attempt_state="succeeded",
                      cause="completed", starting=True)  # fmt: skip

    async def succeed(tx: Tx) -> None:
        await task_store.tasks_succeed_many(tx, running, done)
        await task_store.tasks_succeed_many(tx, eager, done)
        await task_store.tasks_succeed_many(tx, dataclasses.replace(running, task_ids=[]), done)

    await db.run(succeed)
    r1, r2, l2 = await get(db, "r1"), await get(db, "r2"), await get(db, "l2")
    assert (r1.state, r1.result, r1.event_seq, r1.finished_at) == (S.SUCCEEDED, {"ok": 1}, 1, done)
    assert (r2.result, r2.attempts, l2.result, l2.attempts) == (None, 1, "early", 1)
    ends = await db.read(lambda tx: attempt_store.attempt_get(tx, "l2", 1))
    assert ends is not None and (ends.state, ends.started_at, ends.ended_at) == (
        AttemptState.SUCCEEDED, done, done,
    )  # fmt: skip

    def move(task_id: str, expected: TaskState, state: TaskState, **fields: object) -> TaskMove:
        return TaskMove(task_id, expected, 1, state, **fields)  # type: ignore[arg-type]

    async def moves(tx: Tx) -> list[int]:
        review = move("r3", S.RUNNING, S.NEEDS_REVIEW, error={"message": "check"}, run_at=now)
        back = move("l1", S.LEASED, S.PENDING, run_at=done)
        return [
            await task_store.tasks_finish(tx, [review, move("r1", S.RUNNING, S.FAILED)], done),
            await task_store.tasks_return_pending(tx, [back], done),
            await task_store.tasks_return_pending(tx, [back], done),  # pending now: fenced
            await task_store.tasks_resolve(
                tx, [move("r3", S.NEEDS_REVIEW, S.SUCCEEDED, result=[1])], done
            ),
            await task_store.tasks_resolve(tx, [move("r2", S.NEEDS_REVIEW, S.FAILED)], done),
            await task_store.tasks_reopen(tx, [move("r1", S.SUCCEEDED, S.PENDING)], done),
            await task_store.tasks_reopen(tx, [move("l1", S.SUCCEEDED, S.PENDING)], done),
            await task_store.task_event_seqs_advance(tx, [("r1", 2), ("r2", 1), ("r3", 1)]),
        ]

    assert await db.run(moves) == [1, 1, 0, 1, 0, 1, 0, 2]
    r1, r3, l1 = await get(db, "r1"), await get(db, "r3"), await get(db, "l1")
    assert (r1.state, r1.result, r1.finished_at, r1.run_at) == (S.PENDING, None, None, done)
    assert r1.max_attempts >= r1.attempts + 1 and r1.event_seq == 2
    assert (r3.state, r3.result, r3.error, r3.event_seq) == (S.SUCCEEDED, [1], None, 1)
    assert (l1.state, l1.lease_token, l1.session_id, l1.run_at) == (S.PENDING, None, None, done)


@pytest.mark.covers("tasks_set_pending_many", "scheduled_due")
async def test_scheduled_tasks_come_due_and_become_pending(db: Database, clock: FakeClock) -> None:
    now = clock.now()
    soon, later = (
        task(clock, t, run_at=now + timedelta(minutes=m)) for t, m in (("s1", 1), ("s2", 2))
    )
    await insert(db, soon, later, task(clock, "p1"))
    due = await db.run(
        lambda tx: task_store.scheduled_due(tx, now + timedelta(seconds=90), limit=5)
    )
    assert due == [soon]
    promote = ["s1", "p1"]
    assert await db.run(lambda tx: task_store.tasks_set_pending_many(tx, promote, now)) == 1
    assert await db.run(lambda tx: task_store.tasks_set_pending_many(tx, [], now)) == 0
    assert await states(db, "s1", "s2", "p1") == [S.PENDING, S.SCHEDULED, S.PENDING]


@pytest.mark.covers("tasks_end_unstarted", "task_request_cancel")
async def test_unstarted_tasks_end_fenced_and_running_ones_are_asked(
    db: Database, clock: FakeClock
) -> None:
    pending = task(clock, "t1")
    running = dataclasses.replace(task(clock, "t2"), state=S.RUNNING)
    await insert(db, pending, running)
    now = clock.advance(timedelta(seconds=1))

    def cancel(t: Task, reason: str | None) -> TaskMove:
        return TaskMove(t.id, t.state, t.lease_epoch, "cancelled", reason=reason)

    async def finish(tx: Tx) -> int:
        return await task_store.tasks_end_unstarted(tx, [cancel(pending, "r")], now)

    assert await db.run(finish) == 1
    assert await db.run(finish) == 0  # the row is no longer pending: fenced
    stale = dataclasses.replace(running, lease_epoch=99)
    assert (
        await db.run(lambda tx: task_store.tasks_end_unstarted(tx, [cancel(stale, None)], now)) == 0
    )

    async def ask(tx: Tx) -> bool:
        return await task_store.task_request_cancel(tx, "t2", "stop", now)

    assert await db.run(ask) is True
    assert await db.run(ask) is False  # already asked
    assert await db.run(lambda tx: task_store.task_request_cancel(tx, "t1", None, now)) is False
    done, asked = await get(db, "t1"), await get(db, "t2")
    assert (done.state, done.finished_at, done.cancel_reason) == (S.CANCELLED, now, "r")
    assert asked.state == S.RUNNING and asked.cancel_requested and asked.cancel_reason == "stop"


@pytest.mark.covers("task_event_insert")
async def test_a_result_event_is_written_once_per_step_of_its_tasks_counter(
    db: Database, clock: FakeClock
) -> None:
    t1, t2 = task(clock, "t1", owner=Owner("workflow", "wf_1")), task(clock, "t2")
    await insert(db, t1, t2)

    async def unit(tx: Tx) -> list[bool]:
        return [
            await task_store.task_event_insert(tx, result_event(t1, 1, S.SUCCEEDED)),
            await task_store.task_event_insert(tx, result_event(t2, 1, S.NEEDS_REVIEW)),
            await task_store.task_event_insert(tx, result_event(t1, 1, S.FAILED, "evt_dup")),
            await task_store.task_event_insert(tx, result_event(t2, 3, S.FAILED)),  # skips 2
            await task_store.task_event_insert(tx, result_event(t2, 2, S.FAILED)),
        ]

    assert await db.run(unit) == [True, True, False, False, True]
    events = await db.read(lambda tx: event_store.task_event_list_pending(tx, limit=10))
    assert [(e.task_id, e.seq, e.state) for e in events] == [
        ("t1", 1, S.SUCCEEDED), ("t2", 1, S.NEEDS_REVIEW), ("t2", 2, S.FAILED),
    ]  # fmt: skip
    assert [(await get(db, t)).event_seq for t in ("t1", "t2")] == [1, 2]


@pytest.mark.covers("idempotency_keys_expire", "tasks_prune")
async def test_retention_forgets_keys_then_prunes_finished_tasks_with_their_history(
    db: Database, clock: FakeClock
) -> None:
    workflow = Owner("workflow", "wf_1")
    plain, processed = task(clock, "f1", idempotency_key="k1"), task(clock, "f2", owner=workflow)
    unprocessed = task(clock, "f3", owner=workflow, idempotency_key="k3")
    waiting = task(clock, "p1", idempotency_key="k4")
    await insert(db, plain, processed, unprocessed, waiting)
    start = clock.now()

    async def finish(tx: Tx) -> None:
        ended = ((plain, S.SUCCEEDED), (processed, S.FAILED), (unprocessed, S.CANCELLED))
        ends = [TaskMove(t.id, S.PENDING, 0, state) for t, state in ended]
        assert await task_store.tasks_end_unstarted(tx, ends, start) == 3
        leased = dataclasses.replace(plain, lease_epoch=1, lease_expires_at=start)
        await attempt_store.attempts_insert(tx, [leased], start)
        for t in (processed, unprocessed):
            await task_store.task_event_insert(tx, result_event(t, 1, S.FAILED))
        await event_store.task_event_mark_processed(tx, "evt_f2_1", start)

    await db.run(finish)
    before = clock.advance(timedelta(days=1))

    async def expire(tx: Tx) -> list[int]:
        return [await task_store.idempotency_keys_expire(tx, before, limit=1) for _ in range(3)]

    assert await db.run(expire) == [1, 1, 0]  # k1 and k3; p1 has not finished
    assert (await get(db, "f1")).idempotency_key is None
    assert (await get(db, "p1")).idempotency_key == "k4"
    assert await db.run(lambda tx: task_store.tasks_prune(tx, start, limit=10)) == 0  # too new
    assert await db.run(lambda tx: task_store.tasks_prune(tx, before, limit=10)) == 2
    left = await db.read(lambda tx: task_store.tasks_get_many(tx, ["f1", "f2", "f3", "p1"]))
    assert [t.id for t in left] == ["f3", "p1"]  # f3's event is not processed yet
    assert await db.read(lambda tx: attempt_store.attempt_list(tx, "f1")) == []


@pytest.mark.covers("tasks_finished_per_minute")
async def test_finished_tasks_are_counted_per_minute(db: Database, clock: FakeClock) -> None:
    start = clock.now()  # on a minute's start
    await insert(db, *(task(clock, f"t{i}") for i in range(1, 5)), task(clock, "t5", scope=OTHER))

    async def cancel_at(after_s: int, *task_ids: str) -> None:
        moves = [TaskMove(t, TaskState.PENDING, 0, TaskState.CANCELLED, finished=True)
                 for t in task_ids]  # fmt: skip
        at = start + timedelta(seconds=after_s)
        await db.run(lambda tx: task_store.tasks_end_unstarted(tx, moves, at))

    await cancel_at(-30, "t4")  # before the range asked
    await cancel_at(5, "t1")
    await cancel_at(50, "t2")
    await cancel_at(61, "t3", "t5")
    counts = await db.read(lambda tx: task_store.tasks_finished_per_minute(tx, SCOPE, start))
    first = start.strftime("%Y-%m-%d %H:%M")
    second = (start + timedelta(minutes=1)).strftime("%Y-%m-%d %H:%M")
    assert counts == {first: 2, second: 1}


@pytest.mark.covers("queue_state_counts_upto")
async def test_counts_by_state_stop_past_a_bound(db: Database, clock: FakeClock) -> None:
    await insert(db, *(task(clock, f"t{i}") for i in range(5)), task(clock, "x", queue="other"))
    counts = await db.read(
        lambda tx: task_store.queue_state_counts_upto(tx, SCOPE, "emails", ["pending", "failed"], 3)
    )
    assert counts == {"pending": 4, "failed": 0}  # 5 pending: counted to 3 + 1 only
    exact = await db.read(
        lambda tx: task_store.queue_state_counts_upto(tx, SCOPE, "emails", ["pending"], 10)
    )
    assert exact == {"pending": 5}


@pytest.mark.covers("tasks_lease_many")
async def test_a_lease_reads_the_workflow_of_a_step_task(db: Database, clock: FakeClock) -> None:
    now = clock.now()
    owner = Owner(task_store.WORKFLOW_OWNER, "wf_1", "thumbnails:i3")
    stray = Owner(task_store.WORKFLOW_OWNER, "wf_gone", "charge")
    job = Owner("job", "wf_1")
    await insert(db, task(clock, "plain"), task(clock, "step", owner=owner),
                 task(clock, "stray", owner=stray), task(clock, "other", owner=job))  # fmt: skip
    flow = Workflow(
        id="wf_1", scope=SCOPE, definition="album", version="3", state=WorkflowState.RUNNING,
        input={}, output=None, error=None, context={}, control_version=0, gate_id="gate_1",
        idempotency_key=None, request_hash=None, created_at=now, updated_at=now,
        finished_at=None,
    )  # fmt: skip
    await db.run(lambda tx: workflow_store.workflow_insert(tx, flow))

    async def take(tx: Tx) -> list[Task]:
        return await lease(tx, now, "plain", "step", "stray", "other")

    leased = {t.id: t for t in await db.run(take)}
    assert (leased["step"].owner_name, leased["step"].owner_version) == ("album", "3")
    assert leased["step"].owner_step == "thumbnails:i3" and leased["step"].state == S.LEASED
    for plain in ("plain", "stray", "other"):  # no workflow, or not a workflow's
        assert (leased[plain].owner_name, leased[plain].owner_version) == (None, None)
