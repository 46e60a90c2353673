"""Dispatch on one node (SPEC D1, D2, D4): one claim loop per active queue, never one per
connection. A loop claims only for the free credits of the node's own connections, sends after
the claim commits, wakes at once on a local change (submit, credit, result) and otherwise
finds work from other nodes with a cheap indexed poll whose interval adapts between
``POLL_MIN_S`` and ``poll_max_s``. Every slot it takes or gives back goes through the node's
lease ledger (``gateway/ledger.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Protocol

import structlog

from orbit_server.errors import Unavailable, is_outage
from orbit_server.gateway.ledger import Account, LeaseLedger, Reservation
from orbit_server.observability.metrics import Metrics
from orbit_server.pulse.watch import TaskWatch
from orbit_server.pulse.worker import ClaimRequest, Lease, LeaseRef, Session, Want, WorkerService
from orbit_server.scope import Scope

log = structlog.get_logger("orbit.dispatch")

POLL_MIN_S = 0.01
CLAIM_LANES = 3  # claims of one queue in flight at once on a node
QueueKey = tuple[Scope, str]


class Receiver(Protocol):
    """What the dispatcher needs of a connection."""

    session: Session
    scope: Scope
    account: Account
    draining: bool

    def queues(self) -> Sequence[str]: ...

    def wants(self, queue: str, free: int) -> list[Want]: ...

    def takes(self, queue: str, type_: str, version: str | None) -> bool:
        """Whether a handler of the connection runs tasks of this queue, type and version."""
        ...

    def deliver(self, reservation: Reservation, leases: list[Lease]) -> bool:
        """End the reservation with these leases and queue them for sending; False when the
        connection is gone (the leases are to be given back)."""
        ...


class Dispatcher:
    def __init__(
        self,
        workers: WorkerService,
        watch: TaskWatch,
        metrics: Metrics,
        *,
        max_leases: int,
        poll_max_s: float = 0.2,
    ) -> None:
        self._workers = workers
        self._watch = watch
        self._metrics = metrics
        self._poll_max_s = poll_max_s
        self._receivers: dict[QueueKey, list[Receiver]] = {}
        self._loops: dict[QueueKey, asyncio.Task[None]] = {}
        self.ledger = LeaseLedger(max_leases=max_leases)  # the node's slots, all of them
        self._stopped = False
        self.changed = asyncio.Event()  # set whenever slots stop counting or a connection ends
        self.ledger.on_freed = self.changed.set
        self._background: set[asyncio.Task[None]] = set()
        self._draining_backlog: set[QueueKey] = set()  # queues whose last claim was filled

    # -- connections --------------------------------------------------------------------------

    def attach(self, receiver: Receiver) -> None:
        for queue in receiver.queues():
            key = (receiver.scope, queue)
            self._receivers.setdefault(key, []).append(receiver)
            if key not in self._loops and not self._stopped:
                self._loops[key] = asyncio.create_task(self._run(key), name=f"dispatch:{queue}")
            self._watch.notify_queue(*key)

    def detach(self, receiver: Receiver) -> None:
        for queue in receiver.queues():
            key = (receiver.scope, queue)
            found = self._receivers.get(key, [])
            if receiver in found:
                found.remove(receiver)
            if not found:
                self._receivers.pop(key, None)
                self._watch.notify_queue(*key)  # the loop sees no receivers and ends

    def reserve(
        self, scope: Scope, queue: str, type_: str, version: str | None
    ) -> _DirectSlot | None:
        """A free slot of a connection for one task submitted on this node (decision 0010):
        its credit and the node's lease budget are taken until it is delivered or given back."""
        if self._stopped or self.ledger.budget <= 0:
            return None
        for receiver in self._receivers.get((scope, queue), ()):
            if (
                receiver.account.free > 0
                and not receiver.draining
                and receiver.takes(queue, type_, version)
            ):
                reservation = self.ledger.reserve(receiver.account, 1)
                if reservation is not None:
                    return _DirectSlot(self, receiver, reservation)
        return None

    def wake(self, scope: Scope, queue: str) -> None:
        self._watch.notify_queue(scope, queue)

    async def release(self, refs: list[LeaseRef]) -> None:
        """Give leases back that could not be sent (their lease would run out otherwise)."""
        try:
            await self._workers.release(refs)
        except Exception as exc:  # they run out instead
            level = log.debug if is_outage(exc) else log.warning  # the store tells an outage
            level("leases not given back", count=len(refs), reason=str(exc))

    def release_soon(self, refs: list[LeaseRef]) -> None:
        """``release`` from code that cannot wait for it (the task is kept until it ends)."""
        task = asyncio.get_running_loop().create_task(self.release(refs), name="release")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    @property
    def inflight(self) -> int:
        """Slots of this node's connections reserved or held (the ledger's count)."""
        return self.ledger.inflight

    async def stop(self) -> None:
        """Stop claiming (drain): the loops end; connections stay until they close."""
        self._stopped = True
        loops = list(self._loops.values())
        for task in loops:
            task.cancel()
        # gather, not a suppressed await of each: a cancellation of the caller (a second
        # signal cutting the drain short) must reach the caller, not be taken for a loop's.
        await asyncio.gather(*loops, return_exceptions=True)

    # -- the loop of one queue ----------------------------------------------------------------

    async def _run(self, key: QueueKey) -> None:
        event = self._watch.queue_event(*key)
        interval = POLL_MIN_S
        claims: set[asyncio.Task[bool | None]] = set()
        lane_done = asyncio.Event()

        def claimed(task: asyncio.Task[bool | None]) -> None:
            claims.discard(task)
            lane_done.set()
            if not task.cancelled() and task.exception() is None and task.result():
                event.set()  # it found work: look for more at once
            # False (nothing leased) or None (the claim failed): the next look waits for a
            # change (a submit, a result, credits) or the poll, never a hot loop when ready
            # rows are there but cannot be taken (a queue at its limit, other versions).

        try:
            while self._receivers.get(key) and not self._stopped:
                if len(claims) >= CLAIM_LANES:
                    # Every lane is busy: wait for one to end; a change meanwhile stays set in
                    # ``event`` and the look after it sees it.
                    lane_done.clear()
                    await lane_done.wait()
                    continue
                event.clear()
                takes: list[tuple[Receiver, Reservation]] = []
                try:
                    takes = await self._reserve(key)
                except Unavailable as exc:
                    log.debug("claim skipped: database unavailable", reason=exc.message)
                    interval = self._poll_max_s
                if takes:
                    # Run the claim beside the loop: while it commits, another connection's
                    # credits can be claimed in a second transaction (SKIP LOCKED keeps them
                    # apart), up to CLAIM_LANES at once.
                    task = asyncio.create_task(self._claim(key, takes), name=f"claim:{key[1]}")
                    claims.add(task)
                    task.add_done_callback(claimed)
                    continue
                try:
                    async with asyncio.timeout(interval):
                        await event.wait()
                    interval = POLL_MIN_S
                except TimeoutError:  # an empty look does not shorten the poll (a paused queue)
                    interval = min(interval * 2, self._poll_max_s)
        except Exception:
            log.exception("dispatch loop failed", queue=key[1])
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(self._poll_max_s * 10)  # not a hot loop on a lasting fault
        finally:
            for task in claims:
                task.cancel()
            await asyncio.gather(*claims, return_exceptions=True)
            self._loops.pop(key, None)
            if key in self._receivers and not self._stopped:  # a receiver came back meanwhile
                self._loops[key] = asyncio.create_task(self._run(key), name=f"dispatch:{key[1]}")
            else:
                self._watch.forget_queue(*key)

    async def _reserve(self, key: QueueKey) -> list[tuple[Receiver, Reservation]]:
        """Take the credits of the queue's connections (and the node's lease budget) for one
        claim, if there may be work; none when there is nothing to claim for or with."""
        scope, queue = key
        found = self._receivers.get(key, [])
        if len(found) > 1:  # rotate: the first connection is not always served first
            found.append(found.pop(0))
        ready = [r for r in found if r.account.free > 0 and not r.draining]
        if not ready or self.ledger.budget <= 0:
            return []
        # A submit on this node said there is work, or the last claim filled all it asked for
        # (a backlog is draining): claim at once. Otherwise look first, one index seek, so that
        # an idle poll costs no write transaction.
        if (
            not self._watch.take_work(scope, queue)
            and key not in self._draining_backlog
            and not await self._workers.has_ready(scope, queue)
        ):
            return []
        # Reserved before the claim, so that other claims see them taken while it runs; what
        # was not leased is given back.
        takes: list[tuple[Receiver, Reservation]] = []
        for receiver in ready:
            if self.ledger.budget <= 0:
                break
            reservation = self.ledger.reserve(receiver.account, receiver.account.free)
            if reservation is not None:  # none: its credits went meanwhile, or it closed
                takes.append((receiver, reservation))
        return takes

    async def _claim(self, key: QueueKey, takes: list[tuple[Receiver, Reservation]]) -> bool | None:
        """One claim for the reserved credits, and the sending of what it leased; True if
        anything was leased, None if the claim failed (its credits are given back)."""
        scope, queue = key
        started = time.perf_counter()
        results: list[list[Lease]] = [[] for _ in takes]
        lost: list[Lease] = []
        try:
            results = await self._workers.claim_many(
                scope,
                [
                    ClaimRequest(r.session, tuple(r.wants(queue, taken.slots)), taken.slots)
                    for r, taken in takes
                ],
            )
            elapsed = time.perf_counter() - started
        except Unavailable as exc:
            log.debug("claim skipped: database unavailable", reason=exc.message)
            return None
        except Exception:
            log.exception("claim failed", queue=queue)
            return None
        finally:
            # Every reservation ends here, once: with what it leased (sent now), or unused.
            for (receiver, taken), leases in zip(takes, results, strict=True):
                if not receiver.deliver(taken, leases):
                    lost += leases
        if all(
            len(leases) == taken.slots for (_, taken), leases in zip(takes, results, strict=True)
        ):
            self._draining_backlog.add(key)
        else:
            self._draining_backlog.discard(key)
        if not any(results):
            return False
        self._metrics.claim_seconds.observe(elapsed)
        if lost:
            # A connection went away between claim and send: give the work back now instead
            # of letting the leases run out.
            await self.release([lease.ref for lease in lost])
        return True


class _DirectSlot:
    """One slot of a connection, taken for a task leased as it is submitted (the
    ``pulse.direct.Reservation`` the dispatcher provides)."""

    def __init__(
        self, dispatcher: Dispatcher, receiver: Receiver, reservation: Reservation
    ) -> None:
        self._dispatcher = dispatcher
        self._receiver = receiver
        self._reservation = reservation
        self.session = receiver.session

    def deliver(self, lease: Lease) -> None:
        if not self._receiver.deliver(self._reservation, [lease]):
            # The connection went away meanwhile: the lease is given back now rather than
            # left to run out.
            self._dispatcher.release_soon([lease.ref])

    def give_back(self) -> None:
        self._dispatcher.ledger.give_back(self._reservation)
