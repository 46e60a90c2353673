"""Store methods of key permits: one row per queue and concurrency key counting its leased and
running tasks (decisions 0004, 0012), and the admission reads that start from those rows — a
key's free permits and the first of its pending tasks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from orbit_server.scope import Scope
from orbit_server.store.base import Tx, chunks, scope_params

HEADS_PER_STATEMENT = 200  # keys whose heads one statement reads (SQLite allows 500 parts)
KEYS_PER_STATEMENT = 500  # keys in one IN list


@dataclass(frozen=True, slots=True)
class KeyAdmission:
    """A concurrency key's state for admission: free permits, first pending task (open gate
    or none), and its rows in the claim range — how many, and the first of them."""

    free: int
    head: str | None
    admitted: int
    admitted_first: str | None


async def key_permits_ensure(
    tx: Tx, scope: Scope, queue: str, keys: Sequence[str], now: datetime
) -> None:
    """Create the permit rows (count 0) of those concurrency keys that have none, in one
    statement; rows that exist are left as they are."""
    if keys:
        params = {**scope_params(scope), "queue": queue, "now": now}
        rows = [{**params, "concurrency_key": key} for key in keys]
        await tx.execute_many("key_permits_insert_missing", rows)


async def key_permit_active(tx: Tx, scope: Scope, queue: str, concurrency_key: str) -> int:
    """How many tasks of this concurrency key are leased or running (0 without a row)."""
    row = await tx.fetch_one(
        "key_permit_get",
        {**scope_params(scope), "queue": queue, "concurrency_key": concurrency_key},
    )
    return 0 if row is None else int(row["active"])


async def key_permits_add_many(
    tx: Tx, scope: Scope, queue: str, deltas: Mapping[str, int], now: datetime
) -> None:
    """Move many concurrency keys' counts (rows the caller has locked): one statement per
    distinct delta."""
    by_delta: dict[int, list[str]] = {}
    for key, delta in sorted(deltas.items()):
        if delta:
            by_delta.setdefault(delta, []).append(key)
    for delta, keys in sorted(by_delta.items()):
        await tx.execute(
            "key_permits_add_many",
            {**scope_params(scope), "queue": queue, "keys": keys, "delta": delta, "now": now},
        )


async def key_permits_prune(tx: Tx, before: datetime, *, limit: int) -> int:
    """Delete up to ``limit`` permit rows of keys idle since before ``before``."""
    return await tx.execute("key_permits_prune", {"before": before, "limit": limit})


async def key_permits_lock(
    tx: Tx, scope: Scope, queue: str, keys: Sequence[str], now: datetime
) -> dict[str, int]:
    """Lock the permit rows of ``keys`` (in key order), creating those that do not exist (a
    key's first task, or one idle long enough to be pruned); answers their counts."""
    ordered = sorted(set(keys))
    if not ordered:
        return {}
    params = {**scope_params(scope), "queue": queue}
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
    params = {**scope_params(scope), "queue": queue, "keys": ordered}
    existing = {
        str(r["concurrency_key"]) for r in await tx.fetch_all("key_permits_existing", params)
    }
    await key_permits_ensure(tx, scope, queue, [k for k in ordered if k not in existing], now)
    rows = await tx.fetch_all("key_permits_lock_free", params)
    return {str(r["concurrency_key"]): int(r["active"]) for r in rows}


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
            "keys_first_pending", {**scope_params(scope), "queue": queue, "keys": list(keys)}
        )
        for row in rows:
            if row["id"] is not None:
                heads[str(row["concurrency_key"])].append(str(row["id"]))
    wanted = sorted((key, n) for key, n in limits.items() if n > 1)
    for part in chunks(wanted, HEADS_PER_STATEMENT):
        many = [
            {**scope_params(scope), "queue": queue, "concurrency_key": key, "limit": n}
            for key, n in part
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
            "keys_admission", {**scope_params(scope), "queue": queue, "keys": list(part)}
        )
        for r in rows:
            found[str(r["concurrency_key"])] = KeyAdmission(
                free=int(r["free"]),
                head=None if r["head"] is None else str(r["head"]),
                admitted=int(r["admitted"]),
                admitted_first=None if r["admitted_first"] is None else str(r["admitted_first"]),
            )
    return found
