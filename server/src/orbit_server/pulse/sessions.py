"""Worker sessions (SPEC D1, D3): a session per worker connection, persisted so that any node
can count a queue's workers and so that a worker reconnecting to any node gets a verdict for
each attempt it still holds, checked in the database."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from orbit_server.clock import Clock
from orbit_server.ids import new_id
from orbit_server.pulse.worker import LeaseRef
from orbit_server.scope import Scope
from orbit_server.store import Database, Tx
from orbit_server.store import sessions as sstore
from orbit_server.store import tasks as task_store


@dataclass(frozen=True, slots=True)
class HeldRef:
    """An attempt a reconnecting worker says it still holds (``hello.held``)."""

    task_id: str
    attempt: int
    lease_token: str


@dataclass(frozen=True, slots=True)
class OpenedSession:
    session_id: str
    continuing: list[LeaseRef]  # held attempts whose lease still holds, now this session's
    stopped: list[LeaseRef]  # held attempts that no longer hold: the worker must stop them


class SessionService:
    def __init__(self, db: Database, clock: Clock, *, node: str, seen_window_ms: int) -> None:
        self._db = db
        self._clock = clock
        self._node = node
        self._seen_window = timedelta(milliseconds=seen_window_ms)

    async def open(
        self,
        scope: Scope,
        *,
        key_id: str,
        worker_id: str,
        capacity: int,
        handlers: list[dict[str, Any]],
        held: Sequence[HeldRef],
        queues: frozenset[str] | None = None,
        sdk: str | None = None,
        protocol: int | None = None,
    ) -> OpenedSession:
        """Record a new session and move each held attempt whose lease still holds to it. An
        attempt is adopted only within the key's rights: the task in ``scope`` and, for a key
        limited to ``queues``, in one of them; any other answers ``stop`` like a stale one.
        Open sessions of the same worker that their node stopped refreshing end as
        ``replaced``."""
        session_id = new_id("ses_")

        async def unit(tx: Tx) -> OpenedSession:
            now = self._clock.now()
            session = sstore.NewSession(
                session_id, scope, self._node, worker_id, key_id, capacity, handlers,
                sdk=sdk, protocol=protocol,
            )  # fmt: skip
            await sstore.sessions_replace(tx, scope, worker_id, now - self._seen_window, now)
            await sstore.session_insert(tx, session, now)
            continuing: list[LeaseRef] = []
            stopped: list[LeaseRef] = []
            rows = await task_store.tasks_lock_many_in(tx, scope, [h.task_id for h in held])
            for one in sorted(held, key=lambda r: (r.task_id, r.attempt)):
                ref = LeaseRef(one.task_id, one.attempt, one.lease_token, session_id)
                task = rows.get(one.task_id)
                adoption = task_store.LeaseAdoption(
                    one.task_id, one.attempt, one.lease_token, session_id, self._node, worker_id
                )
                adopted = (  # rows of other scopes were not read
                    task is not None
                    and (queues is None or task.queue in queues)
                    and await task_store.task_adopt(tx, adoption, now)
                )
                (continuing if adopted else stopped).append(ref)
            return OpenedSession(session_id, continuing, stopped)

        return await self._db.run(unit)

    async def close(self, session_id: str, reason: str) -> None:
        async def unit(tx: Tx) -> None:
            await sstore.session_close(tx, session_id, self._clock.now(), reason)

        await self._db.run(unit)

    async def close_all_of_node(self) -> int:
        """At start: sessions this node id left open belong to a previous run of it."""

        async def unit(tx: Tx) -> int:
            return await sstore.sessions_close_node(tx, self._node, self._clock.now())

        return await self._db.run(unit)

    async def touch(self) -> int:
        """This node's open sessions are alive (called every heartbeat interval)."""

        async def unit(tx: Tx) -> int:
            return await sstore.sessions_touch_node(tx, self._node, self._clock.now())

        return await self._db.run(unit)

    async def workers_per_queue(self, scope: Scope) -> dict[str, int]:
        """Connected workers per queue, across all nodes (a node's sessions count while it
        refreshes them)."""

        async def unit(tx: Tx) -> dict[str, int]:
            return await sstore.sessions_per_queue(tx, scope, self._clock.now() - self._seen_window)

        return await self._db.read(unit)

    async def prune(self, retention_ms: int, *, budget: int = 1000) -> int:
        before = self._clock.now() - timedelta(milliseconds=retention_ms)

        async def unit(tx: Tx) -> int:
            return await sstore.sessions_prune(tx, before, limit=budget)

        return await self._db.run(unit)
