"""Store methods of the claim range (decision 0003): the ``task_ready`` rows of pending tasks a
claim may take (no concurrency key, or one admitted; gate open or none), the reads a claim
makes of them, and the fairness rotation of each queue's types (decision 0017)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from orbit_server.pulse.model import Queue, Task
from orbit_server.scope import Scope
from orbit_server.store.base import Tx, chunks, scope_params
from orbit_server.store.queues import queue_from_row

TYPES_PER_STATEMENT = 200  # types whose outlook one statement reads (SQLite allows 500 parts)
HEADS_READ = 200  # types and priorities of a queue's claim range that one read steps through


@dataclass(frozen=True, slots=True)
class Candidate:
    task_id: str
    priority: int
    run_at: datetime
    fairness_key: str
    concurrency_key: str | None
    handler_version: str | None
    gate_id: str | None


@dataclass(frozen=True, slots=True)
class KeySpan:
    """The fairness keys of one type's claimable work: the first and the last (equal when it
    has one key only), and the key the rotation last leased from (None: not begun)."""

    first: str
    last: str
    after: str | None


@dataclass(frozen=True, slots=True)
class ReadyGroup:
    """Claimable tasks of one queue, type and handler version: how many, the oldest run time."""

    queue: str
    type: str
    handler_version: str | None
    count: int
    oldest_run_at: datetime


async def ready_groups(
    tx: Tx, scope: Scope, *, queue: str | None = None, limit: int = 10_000
) -> list[ReadyGroup]:
    rows = await tx.fetch_all(
        "ready_groups",
        {
            **scope_params(scope),
            "any_queue": 1 if queue is None else 0,
            "queue": queue or "",
            "limit": limit,
        },
    )
    return [
        ReadyGroup(
            queue=str(r["queue"]),
            type=str(r["type"]),
            handler_version=r["handler_version"],
            count=int(r["n"]),
            oldest_run_at=r["oldest_at"],
        )
        for r in rows
    ]


def task_ready_params(task: Task) -> dict[str, Any]:
    """The parameters of ``task_ready_insert`` for one task."""
    return {
        **scope_params(task.scope),
        "task_id": task.id,
        "queue": task.queue,
        "type": task.type,
        "priority": task.priority,
        "run_at": task.run_at,
        "fairness_key": task.fairness_key or "",
        "concurrency_key": task.concurrency_key,
        "handler_version": task.handler_version,
        "gate_id": task.gate_id,
    }


async def task_ready_insert(tx: Tx, task: Task) -> None:
    """Put a pending task into the claim range."""
    await tx.execute("task_ready_insert", task_ready_params(task))


async def task_ready_insert_many(tx: Tx, tasks: Sequence[Task]) -> None:
    """Put pending tasks (no concurrency key, gate open or none) into the claim range (a
    deferred write)."""
    if tasks:
        tx.defer_many("task_ready_insert", [task_ready_params(t) for t in tasks])


async def ready_insert_tasks(tx: Tx, task_ids: Sequence[str]) -> int:
    """Put pending tasks into the claim range (read from their rows)."""
    if not task_ids:
        return 0
    return await tx.execute("ready_insert_tasks", {"task_ids": list(task_ids)})


async def task_ready_delete(tx: Tx, task_id: str) -> bool:
    return await tx.execute("task_ready_delete", {"task_id": task_id}) == 1


async def ready_delete_many(tx: Tx, task_ids: Sequence[str]) -> None:
    """Take tasks out of the claim range (rows the caller holds, or no other transaction
    does: the delete goes row by row through the primary key and waits for no other row); a
    deferred write."""
    if task_ids:
        ids = list(task_ids)
        tx.defer(
            "ready_delete_many",
            {"task_ids": ids, "task_ids_json": msgspec.json.encode(ids).decode()},
        )


async def gate_park(tx: Tx, gate_id: str, *, open_: bool) -> int:
    """Take a closed gate's pending tasks out of the claim range, or put them back on open, so
    they never sit at the head of a queue in front of claimable work."""
    if open_:
        return await tx.execute("ready_insert_for_gate", {"gate_id": gate_id})
    return await tx.execute("ready_delete_for_gate", {"gate_id": gate_id})


async def ready_of_keys(tx: Tx, scope: Scope, queue: str, keys: Sequence[str]) -> set[str]:
    """The tasks of these concurrency keys that are in the claim range."""
    if not keys:
        return set()
    rows = await tx.fetch_all(
        "ready_of_keys", {**scope_params(scope), "queue": queue, "keys": sorted(set(keys))}
    )
    return {str(r["task_id"]) for r in rows}


async def ready_exists(tx: Tx, scope: Scope, queue: str) -> bool:
    """Whether a queue has any row in the claim range (one index seek, no locks)."""
    return await tx.fetch_one("ready_exists", {**scope_params(scope), "queue": queue}) is not None


@dataclass(frozen=True, slots=True)
class ReadyHead:
    """The first claimable run time of one type and priority of a queue."""

    type: str
    priority: int
    run_at: datetime


async def ready_heads(
    tx: Tx, scope: Scope, queue: str, *, most: int = HEADS_READ
) -> list[ReadyHead]:
    """Each type and priority of a queue's claim range with its first run time, in index order:
    one seek each (at most ``most``), however many tasks wait."""
    base = {**scope_params(scope), "queue": queue}
    heads: list[ReadyHead] = []
    row = await tx.fetch_one("ready_head_first", {**base, "after": ""})
    while row is not None and len(heads) < most:
        head = ReadyHead(str(row["type"]), int(row["priority"]), row["run_at"])
        heads.append(head)
        row = await tx.fetch_one(
            "ready_head_next", {**base, "type": head.type, "priority": head.priority}
        )
        if row is None:
            row = await tx.fetch_one("ready_head_first", {**base, "after": head.type})
    return heads


async def queue_oldest_ready_at(tx: Tx, scope: Scope, name: str) -> datetime | None:
    """The run time of the longest-waiting task in a queue's claim range (None: it is empty)."""
    heads = await ready_heads(tx, scope, name)
    return min((h.run_at for h in heads), default=None)


async def ready_count_upto(
    tx: Tx,
    scope: Scope,
    queue: str,
    type_: str,
    *,
    upto: int,
    not_versions: Sequence[str] | None = None,
) -> int:
    """Claimable tasks of a queue's type, counted up to ``upto``; with ``not_versions``, only
    those that name a handler version not among them."""
    row = await tx.fetch_one(
        "ready_count_upto",
        {
            **scope_params(scope),
            "queue": queue,
            "type": type_,
            "upto": upto,
            "any_version": 1 if not_versions is None else 0,
            "versions": list(not_versions or ()) or [""],
        },
    )
    return 0 if row is None else int(row["n"])


async def claim_outlook(
    tx: Tx, scope: Scope, queue: str, types: Sequence[str]
) -> tuple[Queue | None, dict[str, KeySpan]]:
    """What a claim needs to know first, in one statement: the queue (None if it does not
    exist), and for each of ``types`` with claimable work its span of fairness keys; types
    without work are absent."""
    found: Queue | None = None
    spans: dict[str, KeySpan] = {}
    for part in chunks(sorted(set(types)), TYPES_PER_STATEMENT):
        many = [{**scope_params(scope), "queue": queue, "type": t} for t in part]
        for row in await tx.fetch_union("claim_outlook", many):
            found = found or queue_from_row(row)
            if row["first_key"] is not None:
                after = row["fair_after"]
                spans[str(row["type"])] = KeySpan(
                    str(row["first_key"]),
                    str(row["last_key"]),
                    None if after is None else str(after),
                )
    return found, spans


async def ready_fairness_keys(
    tx: Tx, scope: Scope, queue: str, type_: str, *, limit: int, start_after: str | None = None
) -> list[str]:
    """Up to ``limit`` fairness keys with claimable work, in key order after ``start_after``
    and then wrapping around to the first key; one index seek per key (a DISTINCT would read
    every ready row of the queue)."""
    params = {**scope_params(scope), "queue": queue, "type": type_}

    async def next_key(after: str | None) -> str | None:
        if after is None:
            row = await tx.fetch_one("ready_first_fairness_key", params)
        else:
            row = await tx.fetch_one("ready_next_fairness_key", {**params, "after": after})
        return None if row is None else str(row["fairness_key"])

    keys: list[str] = []
    key = await next_key(start_after)
    while key is not None and len(keys) < limit:
        keys.append(key)
        key = await next_key(key)
    if start_after is not None:
        key = await next_key(None)
        while key is not None and key <= start_after and len(keys) < limit:
            keys.append(key)
            key = await next_key(key)
    return keys


async def fairness_cursor_set(
    tx: Tx, scope: Scope, queue: str, type_: str, after_key: str, now: datetime
) -> None:
    """Move the type's fairness rotation: the next claim starts after ``after_key`` (a deferred
    write)."""
    tx.defer(
        "fairness_cursor_set",
        {**scope_params(scope), "queue": queue, "type": type_, "after_key": after_key, "now": now},
    )


async def ready_candidates(
    tx: Tx,
    scope: Scope,
    queue: str,
    type_: str,
    *,
    limit: int,
    fairness_keys: Sequence[str] | None = None,
    versions: Sequence[str] = (),
) -> list[Candidate]:
    """Claimable rows in claim order, locked and skipping rows other claimers hold; with
    ``fairness_keys``, up to ``limit`` rows of each of those keys (one statement for all);
    with ``versions``, only rows of those handler versions or of none (filtered inside the
    index scan, so rows pinned to another version never fill the batch)."""
    params = {
        **scope_params(scope),
        "queue": queue,
        "type": type_,
        "limit": limit,
        "any_version": 0 if versions else 1,
        "versions": list(versions) or [""],
    }
    if fairness_keys is None:
        rows = await tx.fetch_all("ready_candidates", params)
    elif not fairness_keys:
        rows = []
    else:
        rows = await tx.fetch_union(
            "ready_candidates_of_key", [{**params, "fairness_key": key} for key in fairness_keys]
        )
    return [
        Candidate(
            task_id=str(r["task_id"]),
            priority=int(r["priority"]),
            run_at=r["run_at"],
            fairness_key=str(r["fairness_key"]),
            concurrency_key=r["concurrency_key"],
            handler_version=r["handler_version"],
            gate_id=r["gate_id"],
        )
        for r in rows
    ]
