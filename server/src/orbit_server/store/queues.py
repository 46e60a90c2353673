"""Store methods of queues: a queue's row, its settings, and the counters of its waiting and
active work that the transactions moving its tasks keep (decisions 0003, 0009, 0010)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from orbit_server.pulse.model import Queue
from orbit_server.scope import Scope
from orbit_server.store.base import (
    DuplicateKey,
    Row,
    Tx,
    chunks,
    row_scope,
    scope_params,
    utc,
)


def queue_from_row(row: Row) -> Queue:
    return Queue(
        scope=row_scope(row),
        name=str(row["name"]),
        paused=bool(row["paused"]),
        concurrency_limit=row["concurrency_limit"],
        key_concurrency=int(row["key_concurrency"]),
        max_pending=row["max_pending"],
        pending=int(row["pending"]),
        active=int(row["active"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


async def queue_ensure(tx: Tx, scope: Scope, name: str, now: datetime) -> bool:
    """Create the queue row with default settings unless it exists; answers whether created."""
    try:
        await tx.execute("queue_insert", {**scope_params(scope), "name": name, "now": now})
    except DuplicateKey:
        return False
    return True


async def queue_lock_or_create(tx: Tx, scope: Scope, name: str, now: datetime) -> Queue:
    """Lock the queue's row, creating it first if it does not exist.

    Locking before inserting matters on MySQL/MariaDB: a duplicate-key INSERT takes a shared
    lock on the existing row, and two writers upgrading shared locks deadlock each other.
    """
    queue = await queue_get(tx, scope, name, lock=True)
    if queue is None:
        await queue_ensure(tx, scope, name, now)
        queue = await queue_get(tx, scope, name, lock=True)
    assert queue is not None
    return queue


async def queue_get(tx: Tx, scope: Scope, name: str, *, lock: bool = False) -> Queue | None:
    """One queue; ``lock`` holds its row for the rest of the transaction (quota checks)."""
    row = await tx.fetch_one(
        "queue_lock" if lock else "queue_get", {**scope_params(scope), "name": name}
    )
    return None if row is None else queue_from_row(row)


async def queue_list(tx: Tx, scope: Scope, *, limit: int, after: str = "") -> list[Queue]:
    rows = await tx.fetch_all("queue_list", {**scope_params(scope), "after": after, "limit": limit})
    return [queue_from_row(r) for r in rows]


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """Every setting of a queue, as ``queue_update_settings`` writes them."""

    paused: bool
    concurrency_limit: int | None  # None: no limit
    key_concurrency: int
    max_pending: int | None  # None: no quota


async def queue_update_settings(
    tx: Tx, scope: Scope, name: str, config: QueueConfig, now: datetime
) -> None:
    await tx.execute(
        "queue_update_settings",
        {
            **scope_params(scope),
            "name": name,
            "paused": int(config.paused),
            "concurrency_limit": config.concurrency_limit,
            "key_concurrency": config.key_concurrency,
            "max_pending": config.max_pending,
            "now": now,
        },
    )


async def queue_add_counts(
    tx: Tx, scope: Scope, name: str, *, pending: int = 0, active: int = 0, now: datetime
) -> None:
    """Move the queue's counters by the given deltas (in the transaction that moves tasks). The
    row stays locked until the transaction ends: callers do this last, to hold it briefly. A
    deferred write: it goes out with the commit's round trip."""
    if pending or active:
        tx.defer(
            "queue_add_counts",
            {**scope_params(scope), "name": name, "pending": pending, "active": active,
             "now": now},
        )  # fmt: skip


async def queue_add_pending_within(
    tx: Tx, scope: Scope, name: str, pending: int, now: datetime
) -> bool:
    """Count ``pending`` new waiting tasks into an existing queue that stays within its quota;
    False (nothing changed) when the queue is missing or the quota would be exceeded."""
    changed = await tx.execute(
        "queue_add_pending_within",
        {**scope_params(scope), "name": name, "pending": pending, "now": now},
    )
    return changed > 0


async def queue_take_direct(tx: Tx, scope: Scope, name: str, type_: str, now: datetime) -> bool:
    """Count a task leased as it was submitted, if its queue allows that now (decision 0010):
    open, no concurrency limit, nothing of its type waiting in the claim range."""
    changed = await tx.execute(
        "queue_take_direct",
        {**scope_params(scope), "name": name, "type": type_, "now": now},
    )
    return changed > 0


async def queue_take_active_within(tx: Tx, scope: Scope, name: str, n: int, now: datetime) -> bool:
    """Count ``n`` claimed tasks (waiting → active) if the queue is not paused and its
    concurrency limit has room for them; False (nothing changed) otherwise."""
    changed = await tx.execute(
        "queue_take_active_within",
        {**scope_params(scope), "name": name, "n": n, "now": now},
    )
    return changed > 0


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """A queue's counters: ``waiting`` (scheduled or pending) and ``active`` (leased or
    running) tasks."""

    scope: Scope
    name: str
    waiting: int
    active: int


async def queues_with_work(tx: Tx, *, limit: int) -> list[QueueDepth]:
    """Up to ``limit`` queues of every scope that hold waiting or active tasks, in scope and
    name order."""
    rows = await tx.fetch_all("queues_with_work", {"limit": limit})
    return [
        QueueDepth(row_scope(r), str(r["name"]), int(r["pending"]), int(r["active"])) for r in rows
    ]


async def queues_oldest_pending(
    tx: Tx, queues: Sequence[tuple[Scope, str]]
) -> dict[tuple[Scope, str], datetime]:
    """For each queue that has a pending task, the run time of its first one in submission
    order (the longest waiting but for a retry, which counts from its retry's time), in one
    statement of one index seek per queue."""
    found: dict[tuple[Scope, str], datetime] = {}
    for part in chunks(queues, 200):
        many = [{**scope_params(scope), "queue": name} for scope, name in part]
        for row in await tx.fetch_union("queue_first_pending", many):
            found[(row_scope(row), str(row["queue"]))] = utc(row["run_at"])
    return found
