"""Result events (SPEC P11): read in order, handled, marked processed exactly once.

A consumer handles each event inside the transaction that marks it processed, so a crash
between the two repeats the event rather than losing it, and a duplicate delivery changes
nothing (the mark is conditional). Weave's advancement is the first consumer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from orbit_server.clock import Clock
from orbit_server.pulse.model import ResultEvent
from orbit_server.store import Database, Tx
from orbit_server.store import task_events as event_store

Handler = Callable[[Tx, ResultEvent], Awaitable[None]]


class EventConsumer:
    def __init__(self, db: Database, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    async def pending(self, *, limit: int = 100, after: str = "") -> list[ResultEvent]:
        async def unit(tx: Tx) -> list[ResultEvent]:
            return await event_store.task_event_list_pending(tx, limit=limit, after=after)

        return await self._db.read(unit)

    @staticmethod
    async def pending_owned(tx: Tx, owner_kind: str, *, limit: int) -> list[ResultEvent]:
        """Pending events of tasks owned by ``owner_kind``, oldest first."""
        return await event_store.task_event_list_pending_owned(tx, owner_kind, limit=limit)

    async def mark_many_in(self, tx: Tx, events: list[ResultEvent]) -> set[str]:
        """Mark ``events`` processed in the caller's transaction, which handles them, in two
        statements; answers the ids marked (the others were processed already: the caller
        handles nothing for them)."""
        return await event_store.task_events_mark_processed_many(
            tx, [e.id for e in events], self._clock.now()
        )

    async def process(self, event: ResultEvent, handle: Handler) -> bool:
        """Run ``handle`` and mark the event processed in one transaction.

        Answers False (and runs nothing that commits) when another consumer got there first.
        """

        async def unit(tx: Tx) -> bool:
            if not await event_store.task_event_mark_processed(tx, event.id, self._clock.now()):
                return False
            await handle(tx, event)
            return True

        return await self._db.run(unit)

    async def drain(self, handle: Handler, *, limit: int = 100) -> int:
        """One bounded pass: process what is pending now; answers how many this call handled."""
        handled = 0
        for event in await self.pending(limit=limit):
            if await self.process(event, handle):
                handled += 1
        return handled
