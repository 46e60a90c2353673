"""Writes task transitions (:mod:`orbit_server.pulse.transitions`) in the caller's transaction.

:func:`apply` is the one place where a task's change of state meets the database: the guarded
row statements, the attempt rows, the claim range, permits, queue counts and result events,
and the domain events the node hears of after the commit. It writes any number of
transitions set by set, a few statements for the batch whatever its size: the task rows
(plain successes in one statement, the rest by kind), their attempts and result events, then
per queue the keys' permits and admissions, and each queue's row last (decision 0006). The
caller holds the tasks' rows; a guarded statement that misses a row raises
:class:`TransitionLost`, and the unit rolls back.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from orbit_server.errors import StateConflict
from orbit_server.ids import new_id
from orbit_server.pulse.domain_events import (
    Milestone,
    RoomMade,
    TaskSettled,
    TasksPassed,
    WorkCommitted,
)
from orbit_server.pulse.effects import admit_keys
from orbit_server.pulse.model import ResultEvent, Task
from orbit_server.pulse.states import TaskState
from orbit_server.pulse.transitions import RowWrite, Transition
from orbit_server.scope import Scope
from orbit_server.store import Tx
from orbit_server.store import attempts as attempt_store
from orbit_server.store import claim_range as ready_store
from orbit_server.store import gates as gate_store
from orbit_server.store import queues as queue_store
from orbit_server.store import task_events as event_store
from orbit_server.store import tasks as task_store
from orbit_server.store.tasks import TaskMove


class TransitionLost(StateConflict):
    """A guarded statement changed fewer rows than it was given: a task moved meanwhile."""

    def __init__(self) -> None:
        super().__init__("the task changed meanwhile; read it and try again")


@dataclass(slots=True)
class _QueueChange:
    """What the transitions of one queue give back and take."""

    active: int = 0
    pending: int = 0
    returned: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    readmit: set[str] = field(default_factory=set)  # keys whose admission must be redone
    creates_row: bool = False  # a retry: the queue's row may have to be made


async def apply(tx: Tx, transitions: Sequence[Transition], now: datetime) -> None:
    """Write ``transitions`` (each of a different task, rows held by the caller)."""
    if not transitions:
        return
    plain = [t for t in transitions if t.plain_success]
    rest = [t for t in transitions if not t.plain_success]
    for starting in (False, True):
        group = [t for t in plain if t.starts_attempt is starting]
        if group:
            first = group[0]
            assert first.attempt is not None  # the same for all: the attempt succeeded
            await task_store.tasks_succeed_many(tx, task_store.Successes(
                [t.task.id for t in group], [t.result for t in group],
                from_state=str(first.before), attempt_state=str(first.attempt.state),
                cause=first.attempt.cause, starting=starting,
            ), now)  # fmt: skip
    await _write_rows(tx, rest, now)
    await _end_attempts(tx, [t for t in rest if t.attempt is not None], now)
    await ready_store.ready_delete_many(tx, [t.task.id for t in rest if t.leaves_range])
    await _emit_results(tx, plain, [t for t in rest if t.emits_result], now)
    queues = _queue_changes(transitions)
    await _make_claimable(tx, [t for t in rest if t.claimable and t.task.concurrency_key is None])
    for (scope, queue), change in sorted(queues.items()):
        keys = set(change.returned) | change.readmit
        if keys:  # the key's permit rows before the queue's
            await admit_keys(tx, scope, queue, keys, now, returned=dict(change.returned) or None)
    for (scope, queue), change in sorted(queues.items()):  # the queues' rows last
        if change.creates_row:
            await queue_store.queue_lock_or_create(tx, scope, queue, now)
        await queue_store.queue_add_counts(
            tx, scope, queue, active=change.active, pending=change.pending, now=now
        )
        if change.active:
            tx.publish(RoomMade(scope, queue))
    publish_milestones(tx, Counter((t.task.queue, m) for t in transitions for m in milestones(t)))


# An attempt's end that no report of its worker caused: its lease ran out (or its deadline).
_EXPIRY_CAUSES = frozenset({"lease_expired", "timeout"})
_REACHED = {
    TaskState.SUCCEEDED: Milestone.SUCCEEDED,
    TaskState.FAILED: Milestone.FAILED,
    TaskState.CANCELLED: Milestone.CANCELLED,
    TaskState.NEEDS_REVIEW: Milestone.NEEDS_REVIEW,
}


def milestones(t: Transition) -> list[Milestone]:
    """What the metrics count of one transition: an eager attempt's start, an expired
    lease, and the state it reaches (a retry's wait counts as ``retried``)."""
    out: list[Milestone] = []
    if t.starts_attempt:
        out.append(Milestone.STARTED)
    if t.attempt is not None and t.attempt.cause in _EXPIRY_CAUSES:
        out.append(Milestone.EXPIRED)
    if t.after is TaskState.SCHEDULED and t.before is TaskState.RUNNING:
        out.append(Milestone.RETRIED)
    elif (reached := _REACHED.get(t.after)) is not None:
        out.append(reached)
    return out


def publish_milestones(tx: Tx, passed: Mapping[tuple[str, Milestone], int]) -> None:
    """One ``TasksPassed`` per queue and milestone with a count, heard after the commit (it
    writes nothing: the hot path pays no statement for its metrics)."""
    for (queue, milestone), count in sorted(passed.items()):
        if count > 0:
            tx.publish(TasksPassed(queue, milestone, count))


def _queue_changes(transitions: Sequence[Transition]) -> dict[tuple[Scope, str], _QueueChange]:
    queues: dict[tuple[Scope, str], _QueueChange] = defaultdict(_QueueChange)
    for t in transitions:
        change = queues[(t.task.scope, t.task.queue)]
        key = t.task.concurrency_key
        change.pending += t.waiting_delta
        if t.releases_permits:
            change.active -= 1
            if t.claimable or t.after is TaskState.SCHEDULED:
                change.pending += 1  # waits again
            if key is not None:
                change.returned[key] += 1
        elif key is not None and (t.leaves_range or t.claimable):
            change.readmit.add(key)  # the key admits its next task, or this one again
        change.creates_row |= t.waiting_delta > 0
    return queues


async def _write_rows(tx: Tx, transitions: Sequence[Transition], now: datetime) -> None:
    """The guarded row statements, one set per kind."""
    by_write: dict[RowWrite, list[TaskMove]] = defaultdict(list)
    for t in transitions:
        by_write[t.write].append(_move(t))
    for write, moves in by_write.items():
        if await _ROW_WRITES[write](tx, moves, now) != len(moves):
            raise TransitionLost()


_ROW_WRITES = {
    RowWrite.FINISH: task_store.tasks_finish,
    RowWrite.RETURN: task_store.tasks_return_pending,
    RowWrite.END_UNSTARTED: task_store.tasks_end_unstarted,
    RowWrite.RESOLVE: task_store.tasks_resolve,
    RowWrite.REOPEN: task_store.tasks_reopen,
}


def _move(t: Transition) -> TaskMove:
    task = t.task
    assert isinstance(task, Task)  # only plain successes come from slimmer rows
    return TaskMove(
        task_id=task.id, expected_state=task.state, epoch=task.lease_epoch, state=str(t.after),
        run_at=t.run_at or task.run_at, result=t.result, error=t.error, finished=t.finished,
        reason=t.reason,
    )  # fmt: skip


async def _end_attempts(tx: Tx, transitions: Sequence[Transition], now: datetime) -> None:
    ends = [(t.task, t.attempt) for t in transitions if t.attempt is not None]
    await attempt_store.attempts_update_many(tx, [
        attempt_store.AttemptUpdate(
            task_id=task.id, number=task.lease_epoch, state=end.state, cause=end.cause,
            ended_at=now, error=end.error,
        )
        for task, end in ends
    ])  # fmt: skip


async def _emit_results(
    tx: Tx, counted: Sequence[Transition], rest: Sequence[Transition], now: datetime
) -> None:
    """Result events (SPEC P11): ``counted`` rows had their event counter advanced by the
    statement that moved them; the others advance it here, guarded by its value."""
    if rest and await task_store.task_event_seqs_advance(
        tx, [(t.task.id, t.task.event_seq + 1) for t in rest]
    ) != len(rest):
        raise RuntimeError("a result event of a task the caller holds exists already")
    emitted = [*counted, *rest]
    await event_store.task_events_insert_many(tx, [_result_event(t, now) for t in emitted])
    for t in emitted:
        tx.publish(TaskSettled(t.task.id))


def _result_event(t: Transition, now: datetime) -> ResultEvent:
    task = t.task
    return ResultEvent(
        id=new_id("evt_"), scope=task.scope, task_id=task.id, attempt=task.lease_epoch,
        state=t.after, owner_kind=task.owner_kind, owner_id=task.owner_id,
        created_at=now, seq=task.event_seq + 1,
    )  # fmt: skip


async def _make_claimable(tx: Tx, transitions: Sequence[Transition]) -> None:
    """Pending again without a concurrency key: into the claim range, read back as they are
    now, unless their gate is closed (a closed gate's tasks wait outside it)."""
    if not transitions:
        return
    tasks = await task_store.tasks_get_many(tx, [t.task.id for t in transitions])
    gates = await gate_store.gates_open(tx, [g for t in tasks if (g := t.gate_id) is not None])
    ready = [t for t in tasks if t.gate_id is None or gates[t.gate_id]]
    await ready_store.task_ready_insert_many(tx, ready)
    for scope, queue in sorted({(t.scope, t.queue) for t in ready}):
        tx.publish(WorkCommitted(scope, queue))
