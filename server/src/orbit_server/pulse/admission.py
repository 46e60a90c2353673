"""Admission of a large submit's concurrency keys after its commit (decision 0012).

A submit admits its keys' new tasks into the claim range (decision 0004) by locking each key's
permit row. In the submit's own transaction those locks last until its commit, and a submit of
a thousand keyed tasks then holds a thousand permit rows that the results and claims of those
keys wait for, while it waits for theirs. So a submit with more than ``DEFER_OVER`` keys of a
queue writes a note of them in its transaction instead, and after its commit admits them in
short transactions of ``CHUNK`` keys that skip, and come back for, the keys another transaction
holds; the last pass waits for those. The note goes when every key is admitted; a note a node
left behind (it stopped, or the database went away) is finished by any node's recovery loop
once it is ``STALE_S`` old.

Admitting after the commit is as correct as admitting in it: the permit lock serialises the
admission with every result, claim and other admission of the key, and whatever commits after
the submit sees its tasks. Until then they are pending but not yet claimable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta

import structlog

from orbit_server.clock import Clock
from orbit_server.ids import new_id
from orbit_server.pulse.domain_events import KeysLeftToAdmit
from orbit_server.pulse.effects import admit_keys
from orbit_server.scope import Scope
from orbit_server.store import Database, Tx
from orbit_server.store import admissions as astore
from orbit_server.store import permits as permit_store
from orbit_server.store.admissions import AdmissionNote
from orbit_server.store.base import Unit, chunks

log = structlog.get_logger("orbit.pulse")

DEFER_OVER = 16  # keys of one queue that a submit admits in its own transaction
CHUNK = 100  # keys per admission transaction
SKIPPING_PASSES = 3  # passes that leave out keys another transaction holds, before one that waits
RETRY_S = 0.002  # between passes: what holds a permit row is a claim or result, a few ms long
STALE_S = 5.0  # a note this old is finished by recovery
NOTES_PER_PASS = 10


class KeyAdmissions:
    def __init__(self, db: Database, clock: Clock) -> None:
        self._db = db
        self._clock = clock
        # None: never (SQLite has one writer at a time; nothing is gained by splitting).
        self.defer_over: int | None = None if db.dialect == "sqlite" else DEFER_OVER
        self._running: set[asyncio.Task[None]] = set()
        db.bus.subscribe(KeysLeftToAdmit, lambda event: self.finish([event.note]))

    def defers(self, keys: int) -> bool:
        """Whether a submit with this many keys of one queue leaves them to ``finish``."""
        return self.defer_over is not None and keys > self.defer_over

    async def note(self, tx: Tx, scope: Scope, queue: str, keys: Sequence[str]) -> AdmissionNote:
        """Record, in the submit's transaction, the keys it leaves to be admitted; the caller
        publishes it as ``KeysLeftToAdmit``, on which :meth:`finish` runs after the commit."""
        now = self._clock.now()
        note = AdmissionNote(new_id("adm_"), scope, queue, tuple(sorted(set(keys))), now)
        await astore.admission_note_insert(tx, note.id, scope, queue, note.keys, now)
        return note

    async def finish(self, notes: Sequence[AdmissionNote]) -> None:
        """Admit the keys of committed notes and delete the notes. Runs to its end even if
        the caller is cancelled; a failure is logged and leaves the note to recovery."""
        if not notes:
            return
        task = asyncio.create_task(self._finish_all(notes))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        await asyncio.shield(task)

    async def finish_stale(self) -> int:
        """One recovery pass: finish notes left for ``STALE_S`` (their node stopped before it
        was done, or is still at it: admitting twice changes nothing). Answers how many."""
        before = self._clock.now() - timedelta(seconds=STALE_S)

        async def unit(tx: Tx) -> list[AdmissionNote]:
            return await astore.admission_notes_older(tx, before, limit=NOTES_PER_PASS)

        notes = await self._db.read(unit)
        for note in notes:
            log.warning(
                "admitting keys a submit left", queue=note.queue, keys=len(note.keys),
                note=note.id,
            )  # fmt: skip
            await self._admit(note)
        return len(notes)

    async def _finish_all(self, notes: Sequence[AdmissionNote]) -> None:
        for note in notes:
            try:
                await self._admit(note)
            except Exception as exc:  # the submit is committed: its answer must not fail
                log.warning(
                    "key admission left to recovery", queue=note.queue, note=note.id,
                    error=type(exc).__name__,
                )  # fmt: skip

    async def _admit(self, note: AdmissionNote) -> None:
        """Every key of the note admitted, then the note deleted."""
        todo: Sequence[str] = note.keys
        for done_passes in range(SKIPPING_PASSES + 1):
            wait = done_passes == SKIPPING_PASSES
            held: list[str] = []
            for part in chunks(todo, CHUNK):
                held += await self._db.run(self._part(note.scope, note.queue, part, wait=wait))
            if not held:
                break
            todo = held
            await asyncio.sleep(RETRY_S)

        async def unit(tx: Tx) -> bool:
            return await astore.admission_note_delete(tx, note.id)

        await self._db.run(unit)

    def _part(
        self, scope: Scope, queue: str, keys: Sequence[str], *, wait: bool
    ) -> Unit[list[str]]:
        async def unit(tx: Tx) -> list[str]:
            """Admit the keys no other transaction holds (all of them when ``wait``); answer
            the others."""
            now = self._clock.now()
            if wait:
                await admit_keys(tx, scope, queue, keys, now)
                return []
            free = await permit_store.key_permits_lock_free(tx, scope, queue, keys, now)
            await admit_keys(tx, scope, queue, list(free), now, locked=free)
            return [key for key in keys if key not in free]

        return unit
