"""How pending tasks enter the claim range (decision 0003), for transitions
(:mod:`orbit_server.pulse.apply`), submits and promotions alike. Each records the domain event
of what it did (``WorkCommitted``), which the node hears of after the commit.

A task with a concurrency key enters the claim range only by admission (decision 0004): the
range holds, per key, at most as many of the key's pending tasks as the key has free permits,
the first ones in claim order. A key whose permits are all taken therefore has no rows there,
and any number of its waiting tasks never stand in front of other keys' work."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from orbit_server.pulse.domain_events import WorkCommitted
from orbit_server.pulse.model import Task
from orbit_server.scope import Scope
from orbit_server.store import Tx
from orbit_server.store import claim_range as ready_store
from orbit_server.store import gates as gate_store
from orbit_server.store import permits as permit_store
from orbit_server.store import queues as queue_store


async def admit_key(tx: Tx, scope: Scope, queue: str, key: str, now: datetime) -> None:
    await admit_keys(tx, scope, queue, [key], now)


async def admit_keys(
    tx: Tx,
    scope: Scope,
    queue: str,
    keys: Iterable[str],
    now: datetime,
    *,
    returned: Mapping[str, int] | None = None,
    locked: Mapping[str, int] | None = None,
) -> None:
    """Bring each concurrency key's rows in the claim range to its first pending tasks in
    claim order (open gate or none), as many as the key has free permits; ``returned`` gives
    back permits first (tasks of the key that left leased/running); ``locked``: the keys'
    permit rows, already locked by the caller, and their counts. A few statements for all
    the keys of one queue (one index seek per key for its head, many keys per statement).

    Locks the keys' permit rows (in key order) and only reads the queue's row: permit rows are
    taken before the queue's on every path, and the queue's row is written last (decision
    0006). A change of ``key_concurrency`` readmits every key in its own transaction, taking
    each key's permit row, so an admission that waited for that row reads the committed value.
    """
    ordered = sorted(set(keys))
    if not ordered:
        return
    if returned and set(returned) == set(ordered) and len(set(returned.values())) == 1:
        ordered = await _return_and_admit(tx, scope, queue, returned, now)
        if not ordered:
            return
        returned = None  # given back; the keys left over are admitted the general way
    if locked is not None and set(locked) == set(ordered):
        active = dict(locked)
    else:
        active = await permit_store.key_permits_lock(tx, scope, queue, ordered, now)
    if returned:
        await permit_store.key_permits_add_many(
            tx, scope, queue, {key: -count for key, count in returned.items()}, now
        )
        for key, count in returned.items():
            active[key] = active.get(key, 0) - count
    record = await queue_store.queue_get(tx, scope, queue)
    if record is None:
        return
    free = {key: record.key_concurrency - active.get(key, 0) for key in ordered}
    heads = await permit_store.keys_head_pending(tx, scope, queue, free)
    wanted = {task_id for ids in heads.values() for task_id in ids}
    present = await ready_store.ready_of_keys(tx, scope, queue, ordered)
    await ready_store.ready_delete_many(tx, sorted(present - wanted))
    await _admit(tx, scope, queue, sorted(wanted - present))


async def _admit(tx: Tx, scope: Scope, queue: str, task_ids: list[str]) -> None:
    """Put tasks of one queue into the claim range."""
    if task_ids:
        await ready_store.ready_insert_tasks(tx, task_ids)
        tx.publish(WorkCommitted(scope, queue))


async def _return_and_admit(
    tx: Tx, scope: Scope, queue: str, returned: Mapping[str, int], now: datetime
) -> list[str]:
    """The common case of ``admit_keys`` — tasks left leased/running, the same count per key
    — in three statements: one update gives the permits back (locking the rows in key order,
    as ``key_permits_lock`` would), one read answers each key's free permits, next task and
    rows in the range, and one insert or delete settles the range. Answers the keys this
    could not settle (more than one free permit or admitted row, a permit row missing)."""
    await permit_store.key_permits_add_many(
        tx, scope, queue, {key: -count for key, count in returned.items()}, now
    )
    states = await permit_store.keys_admission(tx, scope, queue, list(returned))
    rest: list[str] = []
    wanted: set[str] = set()
    present: set[str] = set()
    for key in sorted(returned):
        state = states.get(key)
        if state is None or state.free > 1 or state.admitted > 1:
            rest.append(key)
            continue
        if state.free == 1 and state.head is not None:
            wanted.add(state.head)
        if state.admitted_first is not None:
            present.add(state.admitted_first)
    await ready_store.ready_delete_many(tx, sorted(present - wanted))
    await _admit(tx, scope, queue, sorted(wanted - present))
    return rest


async def make_claimable(tx: Tx, task: Task, *, now: datetime) -> None:
    """Put a pending task into the claim range unless its gate is closed (a closed gate's
    tasks wait outside it until the gate opens); a task with a concurrency key goes through
    its key's admission instead."""
    if task.concurrency_key is not None:
        await admit_key(tx, task.scope, task.queue, task.concurrency_key, now)
        return
    if (
        task.gate_id is not None
        and not (await gate_store.gates_open(tx, [task.gate_id]))[task.gate_id]
    ):
        return
    await ready_store.task_ready_insert(tx, task)
    tx.publish(WorkCommitted(task.scope, task.queue))
