"""What operators see of workers (SPEC O-, issue "operators"): every worker session across all
nodes, read from the database (not one node's memory), and the claimable tasks that no
connected worker could take — with why.

A session is ``connected`` while its node refreshes it, ``lost`` when it is still open but its
node stopped refreshing it (the node died), and ``ended`` once closed, with the reason its node
recorded: ``drain`` (the server drained, or the worker stopped after a drain notice),
``worker_stopped`` (the worker closed the connection), ``lost`` (the connection broke, or the
node restarted), ``replaced`` (the worker came back on a new session while the old one was
still open on a dead node), ``revoked``, ``too_slow``, ``protocol_error``, ``error``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from orbit_server.clock import Clock
from orbit_server.errors import NotFound
from orbit_server.scope import Scope
from orbit_server.store import Database, Tx
from orbit_server.store import claim_range as ready_store
from orbit_server.store import governance as key_store
from orbit_server.store import sessions as sstore

WORKER_ROLE = "worker"  # the API key role that may connect workers (governance.keys.Role)
HELD_SHOWN = 1000  # attempts a session's detail lists at most
GROUPS_READ = 10_000  # (queue, type, version) groups of claimable work one look reads at most
KEYS_READ = 10_000  # API keys one look reads to tell whether a queue is in a worker key's scope


@dataclass(frozen=True, slots=True)
class HandlerView:
    queue: str
    type: str
    versions: tuple[str, ...]  # empty: any version


@dataclass(frozen=True, slots=True)
class HeldView:
    task_id: str
    queue: str
    type: str
    state: str
    attempt: int
    leased_at: datetime | None
    started_at: datetime | None
    lease_expires_at: datetime | None


@dataclass(frozen=True, slots=True)
class WorkerView:
    session_id: str
    worker_id: str
    node: str
    status: str  # connected | lost | ended
    connected_at: datetime
    last_seen_at: datetime
    ended_at: datetime | None
    end_reason: str | None
    sdk: str | None
    protocol: int | None
    capacity: int
    held: int
    handlers: tuple[HandlerView, ...]
    attempts: tuple[HeldView, ...] | None = None  # the detail view only


@dataclass(frozen=True, slots=True)
class Unserved:
    """Claimable tasks of one queue, type and handler version that no connected worker could
    take, and why: ``no_handler`` (no connected worker has a handler for the type),
    ``incompatible_version`` (handlers exist, none of the task's version) or
    ``queue_out_of_scope`` (no usable worker key of the environment may serve the queue)."""

    queue: str
    type: str
    version: str | None
    pending: int
    oldest_run_at: datetime
    reason: str


def _handlers(raw: Iterable[dict[str, Any]]) -> tuple[HandlerView, ...]:
    return tuple(
        HandlerView(str(h["queue"]), str(h["type"]), tuple(str(v) for v in h.get("versions", ())))
        for h in raw
    )


def why_unserved(
    queue: str,
    type_: str,
    version: str | None,
    handlers: Sequence[HandlerView],
    key_queues: Sequence[tuple[str, ...] | None],
) -> str | None:
    """Why no connected worker could take a claimable task (None: some worker could).

    The rule of the claim (``gateway/connection.py``): a handler takes a task of its queue and
    type when the task names no version, the handler lists none, or the task's is listed.
    """
    same = [h for h in handlers if h.queue == queue and h.type == type_]
    if any(version is None or not h.versions or version in h.versions for h in same):
        return None
    if same:
        return "incompatible_version"
    if not any(scope is None or queue in scope for scope in key_queues):
        return "queue_out_of_scope"
    return "no_handler"


class WorkerViews:
    """Reads of worker sessions and of unserved work; no writes."""

    def __init__(self, db: Database, clock: Clock, *, seen_window_ms: int) -> None:
        self._db = db
        self._clock = clock
        self._seen_window = timedelta(milliseconds=seen_window_ms)

    def _view(self, record: sstore.SessionRecord, held: int, now: datetime) -> WorkerView:
        if record.closed_at is not None:
            status = "ended"
        elif record.last_seen_at < now - self._seen_window:
            status = "lost"
        else:
            status = "connected"
        return WorkerView(
            session_id=record.id,
            worker_id=record.worker_id,
            node=record.node,
            status=status,
            connected_at=record.connected_at,
            last_seen_at=record.last_seen_at,
            ended_at=record.closed_at,
            end_reason=record.end_reason,
            sdk=record.sdk,
            protocol=record.protocol,
            capacity=record.capacity,
            held=held,
            handlers=_handlers(record.handlers),
        )

    async def list_workers(
        self,
        scope: Scope,
        *,
        queue: str | None,
        ended_within_ms: int,
        limit: int,
        before: str | None,
    ) -> list[WorkerView]:
        """Newest session first: every open one, and those that ended within the window."""
        now = self._clock.now()

        async def unit(tx: Tx) -> list[WorkerView]:
            records = await sstore.sessions_list(
                tx,
                scope,
                ended_after=now - timedelta(milliseconds=ended_within_ms),
                queue=queue,
                before=before or "~",
                limit=limit,
            )
            held = await sstore.sessions_held_counts(tx, [r.id for r in records])
            return [self._view(r, held.get(r.id, 0), now) for r in records]

        return await self._db.read(unit)

    async def worker(self, scope: Scope, session_id: str) -> WorkerView:
        """One session with the attempts it holds now."""
        now = self._clock.now()

        async def unit(tx: Tx) -> WorkerView | None:
            record = await sstore.session_get(tx, session_id)
            if record is None or record.scope != scope:
                return None
            attempts = await sstore.session_held_attempts(tx, session_id, limit=HELD_SHOWN)
            counts = await sstore.sessions_held_counts(tx, [session_id])
            view = self._view(record, counts.get(session_id, 0), now)
            held = tuple(HeldView(**dataclasses.asdict(a)) for a in attempts)
            return dataclasses.replace(view, attempts=held)

        found = await self._db.read(unit)
        if found is None:
            raise NotFound("no such worker session")
        return found

    async def unserved(self, scope: Scope, *, queue: str | None = None) -> list[Unserved]:
        """Claimable work of ``scope`` (or of one queue) that no connected worker could take,
        by queue, type and handler version, oldest first."""
        return await self._db.read(lambda tx: self.unserved_in(tx, scope, queue=queue))

    async def unserved_in(
        self, tx: Tx, scope: Scope, *, queue: str | None = None
    ) -> list[Unserved]:
        """:meth:`unserved` in the caller's transaction."""
        seen_after = self._clock.now() - self._seen_window
        groups = await ready_store.ready_groups(tx, scope, queue=queue, limit=GROUPS_READ)
        if not groups:
            return []
        handlers, key_queues = await _servers(tx, scope, seen_after)
        found = []
        for g in groups:
            reason = why_unserved(g.queue, g.type, g.handler_version, handlers, key_queues)
            if reason is not None:
                found.append(
                    Unserved(g.queue, g.type, g.handler_version, g.count, g.oldest_run_at, reason)
                )
        return sorted(found, key=lambda u: (u.oldest_run_at, u.queue, u.type))

    async def unserved_upto(
        self, scope: Scope, queues: Sequence[str], *, upto: int
    ) -> dict[str, int]:
        """Unserved tasks of each of ``queues``, each of its types counted up to ``upto`` (a
        count past ``upto`` means "more"): index seeks and bounded ranges, where
        :meth:`unserved` groups every claimable row — for pages that must answer fast however
        long the backlog."""
        seen_after = self._clock.now() - self._seen_window

        async def unit(tx: Tx) -> dict[str, int]:
            handlers, key_queues = await _servers(tx, scope, seen_after)
            counts: dict[str, int] = {}
            for queue in queues:
                total = 0
                for type_ in dict.fromkeys(
                    h.type for h in await ready_store.ready_heads(tx, scope, queue)
                ):
                    same = [h for h in handlers if h.queue == queue and h.type == type_]
                    if why_unserved(queue, type_, None, handlers, key_queues) is not None:
                        offered = None  # nothing takes the type, whatever version a task names
                    elif any(not h.versions for h in same):
                        continue  # a handler of any version takes every task of the type
                    else:
                        offered = sorted({v for h in same for v in h.versions})
                    total += await ready_store.ready_count_upto(
                        tx, scope, queue, type_, upto=upto + 1, not_versions=offered
                    )
                if total:
                    counts[queue] = total
            return counts

        return await self._db.read(unit)

    async def unserved_counts(self, tx: Tx, scopes: Iterable[Scope]) -> dict[tuple[str, str], int]:
        """Unserved tasks of ``scopes`` counted by (queue, reason), in the caller's
        transaction (the metrics sampler's)."""
        counts: dict[tuple[str, str], int] = {}
        for scope in sorted(set(scopes)):
            for u in await self.unserved_in(tx, scope):
                counts[(u.queue, u.reason)] = counts.get((u.queue, u.reason), 0) + u.pending
        return counts

    async def task_unserved(
        self, scope: Scope, queue: str, type_: str, version: str | None
    ) -> str | None:
        """Why no connected worker could take a pending task of this kind (None: one could)."""
        seen_after = self._clock.now() - self._seen_window

        async def unit(tx: Tx) -> str | None:
            handlers, key_queues = await _servers(tx, scope, seen_after)
            return why_unserved(queue, type_, version, handlers, key_queues)

        return await self._db.read(unit)


async def _servers(
    tx: Tx, scope: Scope, seen_after: datetime
) -> tuple[list[HandlerView], list[tuple[str, ...] | None]]:
    """The handlers of the scope's connected workers, and the queues each usable worker key
    of the scope may serve (None: every queue)."""
    handlers = [
        h
        for raw in await sstore.sessions_open_handlers(tx, scope, seen_after)
        for h in _handlers(raw)
    ]
    keys = await key_store.key_list(tx, scope, limit=KEYS_READ)
    return handlers, [k.queues for k in keys if k.revoked_at is None and WORKER_ROLE in k.roles]
