"""Store methods of the worker side: claim candidates, gates, key permits, fenced lease writes,
expiry and due scans (decision 0003)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from orbit_server.pulse.model import Attempt, Gate, LockedTask, Queue, Task
from orbit_server.pulse.states import SideEffect, TaskState
from orbit_server.scope import Scope
from orbit_server.store.base import Row, Tx, chunks
from orbit_server.store.base import json_or_none as _json
from orbit_server.store.pulse import (
    attempt_from_row,
    key_permits_ensure,
    queue_from_row,
    task_from_row,
)


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
class KeyAdmission:
    """A concurrency key's state for admission: free permits, first pending task (open gate
    or none), and its rows in the claim range — how many, and the first of them."""

    free: int
    head: str | None
    admitted: int
    admitted_first: str | None


@dataclass(frozen=True, slots=True)
class HeldLease:
    task_id: str
    attempt: int
    lease_token: str
    state: str


def _scope(scope: Scope) -> dict[str, Any]:
    return {"tenant": scope.tenant, "environment": scope.environment}


@dataclass(frozen=True, slots=True)
class KeySpan:
    """The fairness keys of one type's claimable work: the first and the last (equal when it
    has one key only), and the key the rotation last leased from (None: not begun)."""

    first: str
    last: str
    after: str | None


async def claim_outlook(
    tx: Tx, scope: Scope, queue: str, types: Sequence[str]
) -> tuple[Queue | None, dict[str, KeySpan]]:
    """What a claim needs to know first, in one statement: the queue (None if it does not
    exist), and for each of ``types`` with claimable work its span of fairness keys; types
    without work are absent."""
    found: Queue | None = None
    spans: dict[str, KeySpan] = {}
    for part in chunks(sorted(set(types)), HEADS_PER_STATEMENT):
        many = [{**_scope(scope), "queue": queue, "type": t} for t in part]
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
    params = {**_scope(scope), "queue": queue, "type": type_}

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
    """Move the type's fairness rotation: the next claim starts after ``after_key``."""
    await tx.execute(
        "fairness_cursor_set",
        {**_scope(scope), "queue": queue, "type": type_, "after_key": after_key, "now": now},
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
        **_scope(scope),
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


async def ready_delete_many(tx: Tx, task_ids: Sequence[str]) -> int:
    """Take tasks out of the claim range (rows the caller holds, or no other transaction
    does: the delete goes row by row through the primary key and waits for no other row)."""
    if not task_ids:
        return 0
    ids = list(task_ids)
    return await tx.execute(
        "ready_delete_many", {"task_ids": ids, "task_ids_json": msgspec.json.encode(ids).decode()}
    )


async def gate_create(tx: Tx, scope: Scope, gate_id: str, now: datetime) -> None:
    await tx.execute("gate_insert", {**_scope(scope), "id": gate_id, "now": now})


async def gate_set(tx: Tx, scope: Scope, gate_id: str, *, open_: bool, now: datetime) -> bool:
    """Open or close a gate and bump its version; the row lock orders it against claims."""
    changed = await tx.execute(
        "gate_set", {**_scope(scope), "id": gate_id, "open": int(open_), "now": now}
    )
    return changed == 1


async def gate_park(tx: Tx, gate_id: str, *, open_: bool) -> int:
    """Take a closed gate's pending tasks out of the claim range, or put them back on open, so
    they never sit at the head of a queue in front of claimable work."""
    if open_:
        return await tx.execute("ready_insert_for_gate", {"gate_id": gate_id})
    return await tx.execute("ready_delete_for_gate", {"gate_id": gate_id})


async def gate_get(tx: Tx, scope: Scope, gate_id: str, *, lock: bool = False) -> Gate | None:
    """One gate; ``lock`` holds its row exclusively (what opening and closing do)."""
    row = await tx.fetch_one("gate_lock" if lock else "gate_get", {**_scope(scope), "id": gate_id})
    if row is None:
        return None
    return Gate(
        id=str(row["id"]),
        scope=Scope(str(row["tenant"]), str(row["environment"])),
        open=bool(row["open"]),
        version=int(row["version"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


async def gate_delete(tx: Tx, gate_id: str) -> None:
    await tx.execute("gate_delete", {"id": gate_id})


async def gates_open(tx: Tx, gate_ids: Sequence[str]) -> dict[str, bool]:
    """Whether each gate is open, read under a shared lock that a closer must wait for."""
    if not gate_ids:
        return {}
    rows = await tx.fetch_all("gates_read_shared", {"gate_ids": sorted(set(gate_ids))})
    found = {str(r["id"]): bool(r["open"]) for r in rows}
    return {g: found.get(g, False) for g in gate_ids}  # a missing gate is closed


async def key_permits_lock(
    tx: Tx, scope: Scope, queue: str, keys: Sequence[str], now: datetime
) -> dict[str, int]:
    """Lock the permit rows of ``keys`` (in key order), creating those that do not exist (a
    key's first task, or one idle long enough to be pruned); answers their counts."""
    ordered = sorted(set(keys))
    if not ordered:
        return {}
    params = {**_scope(scope), "queue": queue}
    rows = await tx.fetch_all("key_permits_lock", {**params, "keys": ordered})
    found = {str(r["concurrency_key"]): int(r["active"]) for r in rows}
    missing = [key for key in ordered if key not in found]
    if missing:
        await key_permits_ensure(tx, scope, queue, missing, now)
        rows = await tx.fetch_all("key_permits_lock", {**params, "keys": missing})
        found.update({str(r["concurrency_key"]): int(r["active"]) for r in rows})
    return found


async def key_permits_lock_free(
    tx: Tx, scope: Scope, queue: str, keys: Sequence[str], now: datetime
) -> dict[str, int]:
    """Like ``key_permits_lock``, but never waits: rows another transaction holds are left
    out of the answer (on SQLite, with one writer, none is). Missing rows are created first;
    reading which exist takes no lock, so only a key created at the same moment by another
    transaction can make this wait."""
    ordered = sorted(set(keys))
    if not ordered:
        return {}
    params = {**_scope(scope), "queue": queue, "keys": ordered}
    existing = {
        str(r["concurrency_key"]) for r in await tx.fetch_all("key_permits_existing", params)
    }
    await key_permits_ensure(tx, scope, queue, [k for k in ordered if k not in existing], now)
    rows = await tx.fetch_all("key_permits_lock_free", params)
    return {str(r["concurrency_key"]): int(r["active"]) for r in rows}


async def ready_of_keys(tx: Tx, scope: Scope, queue: str, keys: Sequence[str]) -> set[str]:
    """The tasks of these concurrency keys that are in the claim range."""
    if not keys:
        return set()
    rows = await tx.fetch_all(
        "ready_of_keys", {**_scope(scope), "queue": queue, "keys": sorted(set(keys))}
    )
    return {str(r["task_id"]) for r in rows}


HEADS_PER_STATEMENT = 200  # keys whose heads one statement reads (SQLite allows 500 parts)
KEYS_PER_STATEMENT = 500  # keys in one IN list


async def keys_head_pending(
    tx: Tx, scope: Scope, queue: str, limits: Mapping[str, int]
) -> dict[str, list[str]]:
    """For each concurrency key, its first ``limits[key]`` pending tasks in claim order whose
    gate is open (or that have none): an index seek per key, many keys per statement. Keys
    whose permit rows exist (every key the caller admits) and that want one task — the common
    case — are read by one correlated statement; the others by a union of per-key reads."""
    heads: dict[str, list[str]] = {key: [] for key in limits}
    firsts = sorted(key for key, n in limits.items() if n == 1)
    for keys in chunks(firsts, KEYS_PER_STATEMENT):
        rows = await tx.fetch_all(
            "keys_first_pending", {**_scope(scope), "queue": queue, "keys": list(keys)}
        )
        for row in rows:
            if row["id"] is not None:
                heads[str(row["concurrency_key"])].append(str(row["id"]))
    wanted = sorted((key, n) for key, n in limits.items() if n > 1)
    for part in chunks(wanted, HEADS_PER_STATEMENT):
        many = [
            {**_scope(scope), "queue": queue, "concurrency_key": key, "limit": n} for key, n in part
        ]
        for row in await tx.fetch_union("key_head_pending", many):
            heads[str(row["concurrency_key"])].append(str(row["id"]))
    return heads


async def keys_admission(
    tx: Tx, scope: Scope, queue: str, keys: Sequence[str]
) -> dict[str, KeyAdmission]:
    """Each key's ``KeyAdmission``, one statement per ``KEYS_PER_STATEMENT`` keys, for keys
    whose permit rows exist (the caller holds them locked); others are absent."""
    found: dict[str, KeyAdmission] = {}
    for part in chunks(sorted(set(keys)), KEYS_PER_STATEMENT):
        rows = await tx.fetch_all(
            "keys_admission", {**_scope(scope), "queue": queue, "keys": list(part)}
        )
        for r in rows:
            found[str(r["concurrency_key"])] = KeyAdmission(
                free=int(r["free"]),
                head=None if r["head"] is None else str(r["head"]),
                admitted=int(r["admitted"]),
                admitted_first=None if r["admitted_first"] is None else str(r["admitted_first"]),
            )
    return found


async def ready_insert_tasks(tx: Tx, task_ids: Sequence[str]) -> int:
    """Put pending tasks into the claim range."""
    if not task_ids:
        return 0
    return await tx.execute("ready_insert_tasks", {"task_ids": list(task_ids)})


async def gate_pending_keys(tx: Tx, gate_id: str) -> list[tuple[Scope, str, str]]:
    """(scope, queue, concurrency key) of every key with pending tasks behind a gate."""
    rows = await tx.fetch_all("gate_pending_keys", {"gate_id": gate_id})
    return sorted(
        (Scope(str(r["tenant"]), str(r["environment"])), str(r["queue"]), str(r["concurrency_key"]))
        for r in rows
    )


async def gate_pending_queues(tx: Tx, gate_id: str) -> list[tuple[Scope, str]]:
    """(scope, queue) of the pending tasks without a concurrency key behind a gate."""
    rows = await tx.fetch_all("gate_pending_queues", {"gate_id": gate_id})
    return sorted((Scope(str(r["tenant"]), str(r["environment"])), str(r["queue"])) for r in rows)


async def ready_exists(tx: Tx, scope: Scope, queue: str) -> bool:
    """Whether a queue has any row in the claim range (one index seek, no locks)."""
    return await tx.fetch_one("ready_exists", {**_scope(scope), "queue": queue}) is not None


async def queue_pending_keys(tx: Tx, scope: Scope, queue: str) -> list[str]:
    """Every concurrency key with pending tasks in a queue, in key order."""
    rows = await tx.fetch_all("queue_pending_keys", {**_scope(scope), "queue": queue})
    return [str(r["concurrency_key"]) for r in rows]


async def tasks_lock_many(tx: Tx, task_ids: Sequence[str]) -> dict[str, LockedTask]:
    """Lock many task rows in id order (one statement); answers their leases by id."""
    if not task_ids:
        return {}
    rows = await tx.fetch_all("tasks_lock_many", {"task_ids": sorted(set(task_ids))})
    return {str(r["id"]): _locked(r) for r in rows}


async def tasks_lock_many_in(
    tx: Tx, scope: Scope, task_ids: Sequence[str]
) -> dict[str, LockedTask]:
    """``tasks_lock_many`` for the tasks of one scope: ids of other scopes are left alone."""
    if not task_ids:
        return {}
    params = {**_scope(scope), "task_ids": sorted(set(task_ids))}
    rows = await tx.fetch_all("tasks_lock_many_in", params)
    return {str(r["id"]): _locked(r) for r in rows}


def _locked(r: Row) -> LockedTask:
    return LockedTask(
        id=str(r["id"]), scope=Scope(str(r["tenant"]), str(r["environment"])),
        queue=str(r["queue"]), state=TaskState(r["state"]), lease_epoch=int(r["lease_epoch"]),
        lease_token=r["lease_token"], session_id=r["session_id"],
        lease_expires_at=r["lease_expires_at"],
        deadline_at=r["deadline_at"], cancel_requested=bool(r["cancel_requested"]),
        gate_id=r["gate_id"], timeout_ms=int(r["timeout_ms"]),
        concurrency_key=r["concurrency_key"], owner_kind=r["owner_kind"],
        owner_id=r["owner_id"], event_seq=int(r["event_seq"]),
        side_effect=SideEffect(r["side_effect"]),
    )  # fmt: skip


async def tasks_get_many(tx: Tx, task_ids: Sequence[str]) -> list[Task]:
    if not task_ids:
        return []
    rows = await tx.fetch_all("tasks_get_many", {"task_ids": list(task_ids)})
    by_id = {str(r["id"]): task_from_row(r) for r in rows}
    return [by_id[t] for t in task_ids if t in by_id]


async def attempts_insert(tx: Tx, leased: Sequence[Task], now: datetime) -> None:
    """One attempt row per new lease, numbered by the lease epoch. An attempt is never leased
    before the one it follows ended: ``now`` is when this transaction began, on this node's
    clock, and the previous attempt's end may be later (a transaction that committed while
    this one ran, another node's clock ahead of this one's) — then it leases at that end."""
    ended: dict[str, datetime] = {}
    later = {t.id: t.lease_epoch - 1 for t in leased if t.lease_epoch > 1}
    if later:
        for r in await tx.fetch_all("attempts_ended", {"task_ids": sorted(later)}):
            if int(r["number"]) == later[str(r["task_id"])] and r["ended_at"] is not None:
                ended[str(r["task_id"])] = r["ended_at"]
    await tx.execute_many(
        "attempt_insert",
        [
            {
                "task_id": t.id,
                "number": t.lease_epoch,
                "worker_id": t.worker_id,
                "session_id": t.session_id,
                "node": t.node,
                "leased_at": max(now, ended.get(t.id, now)),
                "lease_expires_at": t.lease_expires_at,
            }
            for t in leased
        ],
    )


@dataclass(frozen=True, slots=True)
class AttemptUpdate:
    """A change of one attempt row (``attempt_update``)."""

    task_id: str
    number: int
    state: str
    cause: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    lease_expires_at: datetime | None = None
    error: dict[str, Any] | None = None


async def attempts_update_many(tx: Tx, updates: Sequence[AttemptUpdate]) -> None:
    """Change many attempt rows in one call."""
    if updates:
        await tx.execute_many(
            "attempt_update",
            [
                {
                    "task_id": u.task_id,
                    "number": u.number,
                    "state": u.state,
                    "cause": u.cause,
                    "started_at": u.started_at,
                    "ended_at": u.ended_at,
                    "lease_expires_at": u.lease_expires_at,
                    "error": _json(u.error),
                }
                for u in updates
            ],
        )


async def attempt_get(tx: Tx, task_id: str, number: int) -> Attempt | None:
    rows = await tx.fetch_all("attempt_get", {"task_id": task_id, "number": number})
    return attempt_from_row(rows[0]) if rows else None


async def task_lock_fenced(
    tx: Tx, task_id: str, epoch: int, token: str, session_id: str
) -> Task | None:
    """The task if (and only if) this lease — attempt, token and session — still holds it (or
    last held it, once it ended); locks the row."""
    row = await tx.fetch_one(
        "task_lock_fenced",
        {"id": task_id, "epoch": epoch, "token": token, "session_id": session_id},
    )
    return None if row is None else task_from_row(row)


async def leases_expired(tx: Tx, now: datetime, *, limit: int) -> list[tuple[str, Scope]]:
    """Tasks whose lease ended before ``now`` (skipping rows another node is handling), sorted
    by queue so that every node takes queue rows in one order."""
    rows = await tx.fetch_all("leases_expired", {"now": now, "limit": limit})
    rows.sort(
        key=lambda r: (str(r["tenant"]), str(r["environment"]), str(r["queue"]), str(r["id"]))
    )
    return [(str(r["id"]), Scope(str(r["tenant"]), str(r["environment"]))) for r in rows]


async def scheduled_due(tx: Tx, now: datetime, *, limit: int) -> list[Task]:
    rows = await tx.fetch_all("scheduled_due", {"now": now, "limit": limit})
    return [task_from_row(r) for r in rows]


async def session_leases(tx: Tx, session_id: str) -> list[HeldLease]:
    rows = await tx.fetch_all("session_leases", {"session_id": session_id})
    return [
        HeldLease(str(r["id"]), int(r["lease_epoch"]), str(r["lease_token"]), str(r["state"]))
        for r in rows
    ]
