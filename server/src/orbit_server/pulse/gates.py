"""Execution gates (SPEC P8): open/closed with a version, checked by claim and start under the
row lock that closing takes. Weave closes a workflow's gate to pause it."""

from __future__ import annotations

from collections import defaultdict

from orbit_server.clock import Clock
from orbit_server.errors import NotFound
from orbit_server.ids import new_id
from orbit_server.pulse.domain_events import WorkCommitted
from orbit_server.pulse.effects import admit_keys
from orbit_server.pulse.model import Gate
from orbit_server.scope import Scope
from orbit_server.store import Database, Tx
from orbit_server.store import claim_range as ready_store
from orbit_server.store import gates as gate_store
from orbit_server.store import tasks as task_store


class GateService:
    def __init__(self, db: Database, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    async def create(self, scope: Scope) -> str:
        async def unit(tx: Tx) -> str:
            return await self.create_in(tx, scope)

        return await self._db.run(unit)

    async def create_in(self, tx: Tx, scope: Scope) -> str:
        """A new open gate, in the caller's transaction (a workflow's start)."""
        gate_id = new_id("gate_")
        await gate_store.gate_create(tx, scope, gate_id, self._clock.now())
        return gate_id

    async def set_open(self, scope: Scope, gate_id: str, *, open_: bool) -> Gate:
        """Open or close; once a close has committed no claim or start of its tasks succeeds."""

        async def unit(tx: Tx) -> Gate:
            return await self.set_open_in(tx, scope, gate_id, open_=open_)

        return await self._db.run(unit)

    async def set_open_in(self, tx: Tx, scope: Scope, gate_id: str, *, open_: bool) -> Gate:
        """:meth:`set_open` in the caller's transaction (a workflow's pause and resume)."""
        before = await gate_store.gate_get(tx, scope, gate_id, lock=True)
        if before is None:
            raise NotFound("no such gate")
        now = self._clock.now()
        await gate_store.gate_set(tx, scope, gate_id, open_=open_, now=now)
        if before.open != open_:
            if await ready_store.gate_park(tx, gate_id, open_=open_) and open_:
                for queue_scope, queue in await task_store.gate_pending_queues(tx, gate_id):
                    tx.publish(WorkCommitted(queue_scope, queue))  # claimable again
            # Tasks with a concurrency key enter and leave through their key's admission.
            by_queue: dict[tuple[Scope, str], list[str]] = defaultdict(list)
            for key_scope, queue, key in await task_store.gate_pending_keys(tx, gate_id):
                by_queue[(key_scope, queue)].append(key)
            for (key_scope, queue), keys in sorted(by_queue.items()):
                await admit_keys(tx, key_scope, queue, keys, now)
        gate = await gate_store.gate_get(tx, scope, gate_id)
        assert gate is not None
        return gate

    @staticmethod
    async def delete_in(tx: Tx, gate_id: str) -> None:
        """Forget a gate whose owner is gone (a workflow past the retention)."""
        await gate_store.gate_delete(tx, gate_id)

    async def get(self, scope: Scope, gate_id: str) -> Gate:
        async def unit(tx: Tx) -> Gate | None:
            return await gate_store.gate_get(tx, scope, gate_id)

        gate = await self._db.read(unit)
        if gate is None:
            raise NotFound("no such gate")
        return gate
