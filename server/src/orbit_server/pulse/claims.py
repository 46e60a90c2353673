"""Claims (SPEC P4, P6, P7, D2): a node's dispatch leases ready tasks to its workers' free
capacity, each claim one short transaction that reads the claim range (``task_ready``) in index
order, rotating over fairness keys, and counts what it took into the queue's row last
(decisions 0003, 0004, 0006, 0009). Part of the worker-side service (``WorkerService``)."""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import itertools
import math
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta

from orbit_server.clock import Clock
from orbit_server.ids import new_token
from orbit_server.pulse.leasing import ClaimRequest, Lease, LeaseRef, Session, Want
from orbit_server.pulse.model import Queue
from orbit_server.pulse.states import TaskState
from orbit_server.scope import Scope
from orbit_server.store import Database, Tx
from orbit_server.store import attempts as attempt_store
from orbit_server.store import claim_range as ready_store
from orbit_server.store import gates as gate_store
from orbit_server.store import permits as permit_store
from orbit_server.store import queues as queue_store
from orbit_server.store import tasks as task_store
from orbit_server.store.base import TransientConflict
from orbit_server.store.claim_range import Candidate

FAIRNESS_KEYS_PER_CLAIM = 64
FAIRNESS_KEY_SET_S = 1.0  # how long a type's whole set of fairness keys is reused
DEEP_SCAN = 2000  # most ready rows one claim reads
FREEING_WAIT_S = 0.25  # longest a claim waits for results whose room it planned with


def _claim_order(c: Candidate) -> tuple[int, datetime, str]:
    return (-c.priority, c.run_at, c.task_id)


def _rotated(candidates: list[Candidate], keys: Sequence[str]) -> list[Candidate]:
    """``candidates`` in fair order: by priority, then by turn (within a priority, a key's
    first task is its turn 0, its second turn 1, …), then by the key's place in ``keys`` — the
    rotation's order, starting after where it stands; keys outside it come after, in key
    order."""
    place = {key: i for i, key in enumerate(keys)}
    turn: dict[tuple[int, str], int] = defaultdict(int)
    ranked: list[tuple[int, int, int, str, Candidate]] = []
    for c in sorted(candidates, key=_claim_order):
        key = c.fairness_key
        ranked.append((-c.priority, turn[(c.priority, key)], place.get(key, len(keys)), key, c))
        turn[(c.priority, key)] += 1
    ranked.sort(key=lambda r: r[:4])
    return [r[4] for r in ranked]


Room = tuple[Scope, str]  # a queue, whose concurrency limit's room is counted


class LimitRoom:
    """Room under queues' concurrency limits that this node's transactions are moving and have
    not committed: taken by its claims in flight (another claim of the node does not plan with
    it, decision 0009) and freed by its result transactions in flight (a claim may plan with
    it and count once they have ended, decision 0011). Counts only; each claim transaction's
    share is a ``ClaimRoom`` that gives back what it took, once."""

    def __init__(self, *, wait_for_results: bool) -> None:
        self.taking: dict[Room, int] = defaultdict(int)
        # per queue: the result transactions in flight (each answered once it has ended) and
        # how many tasks each frees
        self.freeing: dict[Room, dict[asyncio.Future[None], int]] = {}
        self.wait_for_results = wait_for_results

    def results_started(self, counts: dict[Room, int]) -> asyncio.Future[None]:
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for room, count in counts.items():
            self.freeing.setdefault(room, {})[ended] = count
        return ended

    def results_ended(self, ended: asyncio.Future[None]) -> None:
        for room in list(self.freeing):
            of_room = self.freeing[room]
            of_room.pop(ended, None)
            if not of_room:
                del self.freeing[room]
        if not ended.done():
            ended.set_result(None)

    def claim(self) -> ClaimRoom:
        return ClaimRoom(self)


class ClaimRoom:
    """One claim transaction's share of ``LimitRoom``: the room it takes, and the results in
    flight whose room it plans with. Once the transaction has counted a claim into a queue's
    row it waits for no more of them: it holds that row until its commit, and a result needs
    the row to commit — waiting then would stall both until the wait's timeout (a claim for
    several connections counts once per connection)."""

    def __init__(self, room: LimitRoom) -> None:
        self._room = room
        self.taken: dict[Room, int] = {}
        self._waits: list[asyncio.Future[None]] = []
        self._counted = False

    def plan(self, room: Room, free: int, take: int) -> int:
        """How many of ``take`` the claim may lease under the limit: ``free`` (read from the
        queue's row) less the room other claims of the node are taking, plus the room results
        in flight are freeing while it has not counted. Takes what it answers."""
        free -= self._room.taking.get(room, 0) - self.taken.get(room, 0)
        freeing = self._room.freeing.get(room, {})
        if freeing and self._room.wait_for_results and not self._counted:
            take = min(take, free + sum(freeing.values()))
            if take > free:
                self._waits.extend(freeing)
        else:
            take = min(take, free)
        if take > 0:
            self.taken[room] = self.taken.get(room, 0) + take
            self._room.taking[room] += take
        return take

    async def before_count(self) -> None:
        """The claim counts into a queue's row next: wait (bounded) for the results it planned
        with; from now on it plans with no more of them."""
        if self._waits and not self._counted:
            await asyncio.wait(self._waits, timeout=FREEING_WAIT_S)
        self._counted = True

    def end(self) -> None:
        """The transaction ended (or runs again): the room it took is counted in the row now,
        or not at all. Ending twice gives back nothing more."""
        for room, count in self.taken.items():
            self._room.taking[room] -= count
            if self._room.taking[room] <= 0:
                del self._room.taking[room]
        self.taken.clear()
        self._waits.clear()
        self._counted = False


class Claims:
    """The claim half of the worker-side service, one per node: what it remembers between
    claims (the types' fairness key sets, room under limits that its claims in flight are
    taking) is the node's own and only saves work or a rerun. The fairness rotation itself is
    in the database (``fairness_cursors``), shared by every node's claims."""

    def __init__(self, db: Database, clock: Clock, *, lease: timedelta) -> None:
        self._db = db
        self._clock = clock
        self._lease = lease
        # (scope, queue, type) → its whole set of fairness keys with ready work, and when read
        self._key_sets: dict[tuple[Scope, str, str], tuple[list[str], float]] = {}
        # Only where transactions write side by side does a claim wait for results: on
        # SQLite (one writer) the results cannot commit while a claim waits for them.
        self.room = LimitRoom(wait_for_results=db.dialect != "sqlite")

    def results_started(self, counts: dict[Room, int]) -> asyncio.Future[None]:
        """A result transaction that frees ``counts`` tasks per queue is under way; set the
        answer when it has ended (committed or not) with ``results_ended``."""
        return self.room.results_started(counts)

    def results_ended(self, ended: asyncio.Future[None]) -> None:
        self.room.results_ended(ended)

    async def has_ready(self, scope: Scope, queue: str) -> bool:
        """Whether the queue may have claimable work: the dispatch loop's cheap poll."""

        async def unit(tx: Tx) -> bool:
            return await ready_store.ready_exists(tx, scope, queue)

        return await self._db.read(unit)

    async def claim_many(self, scope: Scope, requests: Sequence[ClaimRequest]) -> list[list[Lease]]:
        """Claims for several sessions (one node's connections) in one transaction; each
        session's leases carry their own token."""
        if all(r.limit <= 0 for r in requests):
            return [[] for _ in requests]

        room = self.room.claim()  # this claim's share of the room in flight

        async def unit(tx: Tx) -> list[list[Lease]]:
            room.end()  # a rerun plans anew
            now = self._clock.now()
            return [await self._claim_for(tx, scope, request, now, room) for request in requests]

        try:
            return await self._db.run(unit)
        finally:  # after the commit: until then the room is counted here, after it in the row
            room.end()

    async def _claim_for(
        self,
        tx: Tx,
        scope: Scope,
        request: ClaimRequest,
        now: datetime,
        room: ClaimRoom,
    ) -> list[Lease]:
        token = new_token("lse_")
        budget = request.limit
        leases: list[Lease] = []
        wants = sorted((w for w in request.wants if w.free > 0), key=lambda w: (w.queue, w.type))
        for queue_name, of_queue in itertools.groupby(wants, key=lambda w: w.queue):
            if budget <= 0:
                break
            # One statement: the queue, and which types have work at all and over how many
            # fairness keys, so a type with nothing ready costs no claim of its own. A plain
            # read: the queue's row is written only by the claim's last statement, which
            # checks a concurrency limit as it counts (decisions 0006, 0009).
            listed = list(of_queue)
            queue, spans = await ready_store.claim_outlook(
                tx, scope, queue_name, [w.type for w in listed]
            )
            if queue is None or queue.paused:
                continue
            for want in listed:
                span = spans.get(want.type)
                take = min(budget, want.free)
                if span is None or take <= 0:
                    continue
                if queue.concurrency_limit is not None:  # a first look; the count decides
                    free = queue.concurrency_limit - queue.active
                    take = room.plan((scope, queue_name), free, take)
                    if take <= 0:
                        continue
                got = await self._claim_one(
                    tx, scope, request.session, want, queue, take, token, now,
                    span=span, room=room,
                )  # fmt: skip
                leases.extend(got)
                budget -= len(got)
                queue = dataclasses.replace(
                    queue, pending=queue.pending - len(got), active=queue.active + len(got)
                )
        return leases

    async def _claim_one(
        self,
        tx: Tx,
        scope: Scope,
        session: Session,
        want: Want,
        queue: Queue,
        take: int,
        token: str,
        now: datetime,
        *,
        span: ready_store.KeySpan,
        room: ClaimRoom,
    ) -> list[Lease]:
        # Read as many rows as the claim takes: admission keeps keys without free permits and
        # closed gates out of the claim range, and versions are filtered by the index scan, so
        # a row is rarely refused. When a full read still leaves the batch short, read once
        # more, deeper, so a blocked head of the queue does not hide claimable work behind it.
        scan = min(take, DEEP_SCAN)
        one_key = span.first == span.last
        while True:
            candidates = await self._fair_candidates(
                tx, scope, want, scan, take=take, one_key=one_key, after=span.after
            )
            chosen = await self._choose(tx, scope, want, queue, candidates, take, now)
            if len(chosen) >= take or len(candidates) < scan or scan >= DEEP_SCAN:
                break
            scan = DEEP_SCAN
        if not chosen:
            return []
        ids = [c.task_id for c in chosen]
        await ready_store.ready_delete_many(tx, ids)
        expires_at = now + self._lease
        grant = task_store.LeaseGrant(
            lease_token=token,
            expires_at=expires_at,
            session_id=session.session_id,
            node=session.node,
            worker_id=session.worker_id,
        )
        leased = await task_store.tasks_lease_many(tx, ids, grant, now)
        # Only rows this claim really moved count (a row not pending any more is not leased).
        leased = [t for t in leased if t.state == TaskState.LEASED and t.lease_token == token]
        taken_per_key: dict[str, int] = defaultdict(int)
        for t in leased:
            if t.concurrency_key is not None:
                taken_per_key[t.concurrency_key] += 1
        await attempt_store.attempts_insert(tx, leased, now)
        await permit_store.key_permits_add_many(tx, scope, want.queue, taken_per_key, now)
        # Planned with room that results are freeing: count once they have ended; from here on
        # it holds the queue's row (see ClaimRoom).
        await room.before_count()
        await self._count_claimed(tx, queue, len(leased), now)
        moved = {t.id for t in leased}
        served = [c.fairness_key for c in chosen if c.task_id in moved]
        if not one_key and served and served[-1] != span.after:
            # The rotation goes on after the last key this claim leased from, on every node;
            # after the queue's row, the order in which every claim takes the two rows.
            await ready_store.fairness_cursor_set(tx, scope, want.queue, want.type, served[-1], now)
        return [
            Lease(LeaseRef(t.id, t.lease_epoch, token, session.session_id), t, expires_at)
            for t in leased
        ]

    @staticmethod
    async def _count_claimed(tx: Tx, queue: Queue, count: int, now: datetime) -> None:
        """Count the claim into the queue's row, its last statement (decision 0006). Under a
        concurrency limit the count is conditional (decision 0009): the limit was read without
        a lock, and a claim that committed meanwhile may have used the room; then the whole
        claim is run again on fresh counts, so the limit holds without a long lock."""
        if queue.concurrency_limit is None:
            await queue_store.queue_add_counts(
                tx, queue.scope, queue.name, pending=-count, active=count, now=now
            )
        elif not await queue_store.queue_take_active_within(
            tx, queue.scope, queue.name, count, now
        ):
            raise TransientConflict("the queue's concurrency limit was reached meanwhile")

    @staticmethod
    async def _choose(
        tx: Tx,
        scope: Scope,
        want: Want,
        queue: Queue,
        candidates: list[Candidate],
        take: int,
        now: datetime,
    ) -> list[Candidate]:
        """The candidates this claim may lease: open gate, key permits, at most ``take`` (the
        versions were filtered by the candidates' query; the queue's limit is checked when
        the claim counts them, in ``_count_claimed``)."""
        gates = await gate_store.gates_open(tx, [c.gate_id for c in candidates if c.gate_id])
        candidates = [c for c in candidates if c.gate_id is None or gates.get(c.gate_id, False)]
        keyed = [c.concurrency_key for c in candidates if c.concurrency_key is not None]
        permits = await permit_store.key_permits_lock(tx, scope, want.queue, keyed, now)
        chosen: list[Candidate] = []
        taken_per_key: dict[str, int] = defaultdict(int)
        for candidate in candidates:
            if len(chosen) >= take:
                break
            key = candidate.concurrency_key
            if key is not None:
                if permits.get(key, 0) + taken_per_key[key] >= queue.key_concurrency:
                    continue
                taken_per_key[key] += 1
            chosen.append(candidate)
        return chosen

    async def _fair_candidates(
        self,
        tx: Tx,
        scope: Scope,
        want: Want,
        scan: int,
        *,
        take: int,
        one_key: bool,
        after: str | None,
    ) -> list[Candidate]:
        """Up to ``scan`` candidates in the order a claim takes them, rotating over fairness
        keys (SPEC P7): priority first; within a priority, the keys take turns — each key's
        first task, then each key's second, … — starting with the key after ``after`` (where
        the rotation stands) and wrapping around, whatever the tasks' ages. So consecutive
        claims of one task each alternate between the keys with ready work. ``one_key``: all
        ready work of the type has one fairness key, nothing to rotate."""
        if one_key:
            return await ready_store.ready_candidates(
                tx, scope, want.queue, want.type, limit=scan, versions=want.versions
            )
        rotation = (scope, want.queue, want.type)
        keys = await self._fairness_keys(
            tx, scope, want, limit=min(FAIRNESS_KEYS_PER_CLAIM, max(scan, 2)), after=after
        )
        if len(keys) <= 1:
            return await ready_store.ready_candidates(
                tx, scope, want.queue, want.type, limit=scan, versions=want.versions
            )
        share = max(1, math.ceil(scan / len(keys)))
        picked: dict[str, Candidate] = {}
        for c in await ready_store.ready_candidates(
            tx,
            scope,
            want.queue,
            want.type,
            limit=share,
            fairness_keys=keys,
            versions=want.versions,
        ):
            picked[c.task_id] = c
        # The head of the plain claim order too: a task of higher priority under a key that
        # this claim's share of keys does not reach (the first ``take`` rows hold it), and
        # the rest of the batch when the shares fall short. Rows read are locked: no more.
        known = set(keys)
        head = scan if len(picked) < scan else min(scan, take)
        for c in await ready_store.ready_candidates(
            tx, scope, want.queue, want.type, limit=head, versions=want.versions
        ):
            picked.setdefault(c.task_id, c)
            if c.fairness_key not in known:  # a key the remembered set lacks: read it anew
                self._key_sets.pop(rotation, None)
        return _rotated(list(picked.values()), keys)

    async def _fairness_keys(
        self, tx: Tx, scope: Scope, want: Want, *, limit: int, after: str | None
    ) -> list[str]:
        """Up to ``limit`` fairness keys with ready work, in key order after the rotation
        point (wrapping around). Reading them costs an index seek per key; when a read finds
        the type's whole set (fewer than ``limit``), the set is reused for up to
        ``FAIRNESS_KEY_SET_S`` — a key that appears meanwhile is served in plain claim order
        until then, or read at once when a claim meets one of its tasks."""
        rotation = (scope, want.queue, want.type)
        remembered = self._key_sets.get(rotation)
        now = time.monotonic()
        if remembered is not None and now - remembered[1] < FAIRNESS_KEY_SET_S:
            known = remembered[0]
            at = 0 if after is None else bisect.bisect_right(known, after)
            return (known[at:] + known[:at])[:limit]
        keys = await ready_store.ready_fairness_keys(
            tx, scope, want.queue, want.type, limit=limit, start_after=after
        )
        if len(keys) < limit:  # the walk went round: this is every key with ready work
            if len(self._key_sets) > 10_000:
                self._key_sets.clear()
            self._key_sets[rotation] = (sorted(keys), now)
        else:
            self._key_sets.pop(rotation, None)
        return keys
