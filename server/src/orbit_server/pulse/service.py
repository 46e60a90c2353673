"""Pulse's application service for submitters and operators: one short transaction per use case.

The worker side (claim, start, renew, complete) lives in its own service; both move tasks only
through :func:`orbit_server.pulse.states.decide` and keep the queue counters, key permits,
claim range and result events in the same transaction as the state change.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from orbit_server.audit import Actor, AuditWriter
from orbit_server.clock import Clock
from orbit_server.errors import IdempotencyConflict, NotFound, QueueFull, StateConflict
from orbit_server.ids import new_id, new_token
from orbit_server.pulse.admission import KeyAdmissions
from orbit_server.pulse.apply import apply, publish_milestones
from orbit_server.pulse.direct import DirectDispatch, Reservation
from orbit_server.pulse.domain_events import (
    CancelRequested,
    KeysLeftToAdmit,
    Milestone,
    WorkCommitted,
)
from orbit_server.pulse.effects import (
    admit_keys,
)
from orbit_server.pulse.model import Attempt, Queue, Task, TaskSpec, new_task
from orbit_server.pulse.states import Event, IllegalTransition, TaskState, decide
from orbit_server.pulse.transitions import transition
from orbit_server.pulse.watch import TaskWatch
from orbit_server.pulse.worker import Lease, LeaseRef
from orbit_server.scope import Scope
from orbit_server.store import Database, DuplicateKey, Tx
from orbit_server.store import attempts as attempt_store
from orbit_server.store import claim_range as ready_store
from orbit_server.store import gates as gate_store
from orbit_server.store import permits as permit_store
from orbit_server.store import queues as queue_store
from orbit_server.store import tasks as task_store

SETTLED = frozenset({"succeeded", "failed", "cancelled", "needs_review"})


@dataclass(frozen=True, slots=True)
class Submitted:
    task: Task
    created: bool  # False: an idempotent replay answered with the existing task


@dataclass(frozen=True, slots=True)
class QueueView:
    queue: Queue
    counts: dict[str, int]
    oldest_ready_at: datetime | None
    counted_upto: int | None = None  # counts past this are "at least": more than it


@dataclass(frozen=True, slots=True)
class QueueSettings:
    paused: bool | None = None
    concurrency_limit: int | None = None
    clear_concurrency_limit: bool = False
    key_concurrency: int | None = None
    max_pending: int | None = None
    clear_max_pending: bool = False


class TaskService:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        audit: AuditWriter,
        watch: TaskWatch,
        *,
        default_timeout_ms: int,
        lease_ms: int | None = None,
    ) -> None:
        self._db = db
        self._clock = clock
        self._audit = audit
        self._watch = watch
        self._default_timeout_ms = default_timeout_ms
        self._lease = None if lease_ms is None else timedelta(milliseconds=lease_ms)
        # The node's dispatch, when it has workers connected: single submits may then be
        # leased to an idle one in their own transaction (decision 0010).
        self.direct: DirectDispatch | None = None
        self.admissions = KeyAdmissions(db, clock)

    # -- submit -------------------------------------------------------------------------------

    async def submit(self, scope: Scope, spec: TaskSpec) -> Submitted:
        return (await self.submit_many(scope, [spec]))[0]

    async def submit_many(self, scope: Scope, specs: Sequence[TaskSpec]) -> list[Submitted]:
        """All in one transaction: every task is created (or replayed), or none is."""
        now = self._clock.now()
        tasks = self.build(scope, specs, now)

        reservation = self._reserve(scope, tasks, now)
        if reservation is not None:
            leased = await self._submit_leased(scope, tasks[0], reservation, now)
            if leased is not None:
                return [Submitted(leased, created=True)]

        async def unit(tx: Tx) -> list[Submitted]:
            return await self.create_in(tx, scope, tasks, now)

        return await self._db.run(unit)

    def build(self, scope: Scope, specs: Sequence[TaskSpec], now: datetime) -> list[Task]:
        """The tasks ``specs`` ask for, each with a new id, as of ``now``."""
        return [
            new_task(
                spec,
                task_id=new_id(),
                scope=scope,
                now=now,
                default_timeout_ms=self._default_timeout_ms,
            )
            for spec in specs
        ]

    def _reserve(self, scope: Scope, tasks: Sequence[Task], now: datetime) -> Reservation | None:
        """A free slot of a local worker for a lone task that may skip the claim range."""
        if self.direct is None or self._lease is None or len(tasks) != 1:
            return None
        task = tasks[0]
        if (
            task.state != TaskState.PENDING
            or task.run_at > now
            or task.concurrency_key is not None
            or task.gate_id is not None
            or task.idempotency_key is not None
        ):
            return None
        return self.direct.reserve(scope, task.queue, task.type, task.handler_version)

    async def _submit_leased(
        self, scope: Scope, task: Task, reservation: Reservation, now: datetime
    ) -> Task | None:
        """Submit ``task`` leased to the reserved worker, in one transaction, and send it; None
        (the slot given back) when its queue does not allow that now (decision 0010)."""
        assert self._lease is not None
        session = reservation.session
        leased = dataclasses.replace(
            task, state=TaskState.LEASED, lease_epoch=1, lease_token=new_token("lse_"),
            lease_expires_at=now + self._lease, session_id=session.session_id,
            node=session.node, worker_id=session.worker_id,
        )  # fmt: skip
        decide(TaskState.PENDING, Event.CLAIM)

        async def unit(tx: Tx) -> bool:
            await task_store.task_insert_leased(tx, leased)
            await attempt_store.attempts_insert(tx, [leased], now)
            if await queue_store.queue_take_direct(tx, scope, task.queue, task.type, now):
                publish_milestones(tx, {(task.queue, Milestone.SUBMITTED): 1})
                return True
            raise _NotDirect()  # roll back: the ordinary path runs instead

        try:
            await self._db.run(unit)
        except _NotDirect:
            reservation.give_back()
            return None
        except BaseException:
            reservation.give_back()
            raise
        assert leased.lease_token is not None and leased.lease_expires_at is not None
        ref = LeaseRef(leased.id, 1, leased.lease_token, session.session_id)
        reservation.deliver(Lease(ref, leased,
                                  leased.lease_expires_at))  # fmt: skip
        return leased

    async def create_in(
        self,
        tx: Tx,
        scope: Scope,
        tasks: list[Task],
        now: datetime,
    ) -> list[Submitted]:
        """Create (or replay) ``tasks`` of one scope in the caller's transaction — a submit's,
        or another use case's that makes tasks with its own change (schedules, workflows).
        The keys of a large submit are admitted after its commit (decision 0012), on the
        ``KeysLeftToAdmit`` event it records."""
        results: list[Submitted | None] = [None] * len(tasks)
        first_of_key: dict[str, int] = {}
        repeats: dict[int, int] = {}  # a key used twice in one batch: index -> first index
        fresh: list[int] = []
        for i, task in enumerate(tasks):
            key = task.idempotency_key
            if key is None:
                fresh.append(i)
                continue
            if key in first_of_key:
                self._replayed(tasks[first_of_key[key]], task)
                repeats[i] = first_of_key[key]
                continue
            first_of_key[key] = i
            existing = await task_store.task_get_by_idempotency_key(tx, scope, key)
            if existing is not None:
                results[i] = Submitted(self._replayed(existing, task), created=False)
            else:
                fresh.append(i)
        per_queue = Counter(tasks[i].queue for i in fresh)
        keyed = {tasks[i].queue for i in fresh if tasks[i].concurrency_key is not None}
        for name in sorted(keyed):  # a new queue's row exists before its keys' admission
            if await queue_store.queue_get(tx, scope, name) is None:
                await queue_store.queue_lock_or_create(tx, scope, name, now)
        gate_ids = sorted({g for i in fresh if (g := tasks[i].gate_id) is not None})
        gates = await gate_store.gates_open(tx, gate_ids)
        # Tasks without an idempotency key cannot collide: one multi-row insert for them all.
        plain = [i for i in fresh if tasks[i].idempotency_key is None]
        await task_store.tasks_insert_many(tx, [tasks[i] for i in plain])
        for i in plain:
            results[i] = Submitted(tasks[i], created=True)
        for i in fresh:
            if results[i] is not None:
                continue
            task = tasks[i]
            try:
                await task_store.task_insert(tx, task)
            except DuplicateKey:
                # A concurrent submitter of the same key committed first: answer with its task.
                assert task.idempotency_key is not None
                existing = await task_store.task_get_by_idempotency_key(
                    tx, scope, task.idempotency_key
                )
                if existing is None:
                    raise
                results[i] = Submitted(self._replayed(existing, task), created=False)
                per_queue[task.queue] -= 1
                continue
            results[i] = Submitted(task, created=True)
        # Into the claim range: in one insert, or through their key's admission; a closed
        # gate's tasks wait outside it.
        created = [
            r.task
            for r in results
            if r is not None and r.created and r.task.state == TaskState.PENDING
        ]
        keys = {(t.queue, key) for t in created if (key := t.concurrency_key) is not None}
        ready = [
            t
            for t in created
            if t.concurrency_key is None and (t.gate_id is None or gates.get(t.gate_id, False))
        ]
        await ready_store.task_ready_insert_many(tx, ready)
        for name in sorted({t.queue for t in ready}):
            tx.publish(WorkCommitted(scope, name))
        for name in sorted({name for name, _ in keys}):  # once per key however many came
            of_queue = [key for q, key in keys if q == name]
            if self.admissions.defers(len(of_queue)):  # after the commit (decision 0012)
                tx.publish(KeysLeftToAdmit(await self.admissions.note(tx, scope, name, of_queue)))
            else:
                await admit_keys(tx, scope, name, of_queue, now)
        # The queues' rows last (decision 0006): locked for the waiting-tasks quota and counted
        # just before the commit, so results and claims of the queue wait for them only briefly.
        # Over the quota, the whole unit rolls back.
        for name in sorted(per_queue):  # one fixed lock order across submitters
            count = per_queue[name]
            if not count:  # every task of the queue was a replay
                continue
            if await queue_store.queue_add_pending_within(tx, scope, name, count, now):
                continue  # the common case: one statement
            queue = await queue_store.queue_lock_or_create(tx, scope, name, now)
            if queue.max_pending is not None and queue.pending + count > queue.max_pending:
                raise QueueFull(
                    f"queue {name} holds its maximum of {queue.max_pending} waiting tasks"
                )
            await queue_store.queue_add_counts(tx, scope, name, pending=count, now=now)
        publish_milestones(tx, {(name, Milestone.SUBMITTED): n for name, n in per_queue.items()})
        for i, first in repeats.items():
            answer = results[first]
            assert answer is not None
            results[i] = Submitted(answer.task, created=False)
        return [r for r in results if r is not None]

    @staticmethod
    def _replayed(existing: Task, attempt: Task) -> Task:
        if existing.request_hash != attempt.request_hash:
            raise IdempotencyConflict(
                "this idempotency key was used for a different request; use a new key"
            )
        return existing

    # -- read ---------------------------------------------------------------------------------

    async def get(self, scope: Scope, task_id: str) -> Task:
        async def unit(tx: Tx) -> Task | None:
            return await task_store.task_get(tx, scope, task_id)

        task = await self._db.read(unit)
        if task is None:
            raise NotFound("no such task")
        return task

    async def notify_settled(self) -> int:
        """Wake the waiters of tasks that settled, wherever that happened: one read for every
        task waited for on this node (a change made here wakes its waiters at once; this finds
        those made through other nodes). Answers how many were found."""
        waited = self._watch.waited()
        if not waited:
            return 0

        async def unit(tx: Tx) -> list[str]:
            return await task_store.tasks_in_states(tx, waited, SETTLED)

        settled = await self._db.read(unit)
        for task_id in settled:
            self._watch.notify(task_id)
        return len(settled)

    async def wait(self, scope: Scope, task_id: str, wait_ms: int) -> Task:
        """The task once it is terminal or needs review, or as it is when ``wait_ms`` ends.

        Local changes wake the waiter at once; changes made by other nodes are found by
        ``notify_settled`` (every 50 ms) and by a re-read at least every ``TaskWatch.poll_s``.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000
        while True:
            with self._watch.watching(task_id) as changed:
                task = await self.get(scope, task_id)
                remaining = deadline - loop.time()
                if task.state in SETTLED or remaining <= 0:
                    return task
                await self._watch.wait(changed, remaining)

    async def list_tasks(
        self,
        scope: Scope,
        *,
        limit: int,
        before: str | None = None,
        queue: str | None = None,
        state: str | None = None,
        type_: str | None = None,
        label: tuple[str, str] | None = None,
    ) -> tuple[list[Task], str | None]:
        """A page of tasks, newest first, and the cursor (last id examined) for the next one.

        ``type`` and ``label`` filter the pages that the indexed filters produce, reading at
        most a few pages per call, so a sparse filter may answer a short page with a cursor.
        """

        def keep(task: Task) -> bool:
            if type_ is not None and task.type != type_:
                return False
            return label is None or task.labels.get(label[0]) == label[1]

        async def unit(tx: Tx) -> tuple[list[Task], str | None]:
            found: list[Task] = []
            cursor = before or task_store.LAST
            for _ in range(10):  # bounded work per request
                page = await task_store.task_list(
                    tx, scope, limit=limit, before=cursor, queue=queue, state=state
                )
                for task in page:
                    cursor = task.id
                    if keep(task):
                        found.append(task)
                        if len(found) == limit:
                            return found, task.id
                if len(page) < limit:
                    return found, None
            return found, cursor

        return await self._db.read(unit)

    async def finished_per_minute(
        self, scope: Scope, *, minutes: int = 60
    ) -> list[tuple[datetime, int]]:
        """Tasks that finished in each of the last ``minutes`` minutes, oldest first (zeros
        included): a throughput chart."""
        now = self._clock.now().replace(second=0, microsecond=0)
        since = now - timedelta(minutes=minutes - 1)
        counts = await self._db.read(
            lambda tx: task_store.tasks_finished_per_minute(tx, scope, since)
        )
        slots = [since + timedelta(minutes=i) for i in range(minutes)]
        return [(m, counts.get(m.strftime("%Y-%m-%d %H:%M"), 0)) for m in slots]

    async def attempts_of_many(
        self, scope: Scope, task_ids: Sequence[str]
    ) -> dict[str, list[Attempt]]:
        """The attempts of these tasks of ``scope``, in one read (a list's page)."""

        async def unit(tx: Tx) -> dict[str, list[Attempt]]:
            tasks = await task_store.tasks_get_many(tx, task_ids)
            mine = [t.id for t in tasks if t.scope == scope]
            return await attempt_store.attempts_of_tasks(tx, mine)

        return await self._db.read(unit)

    async def latest_attempt(self, task: Task) -> Attempt | None:
        """The task's latest attempt (the one its lease number names), or None before its
        first lease: one read by primary key."""
        if task.lease_epoch < 1:
            return None
        return await self._db.read(
            lambda tx: attempt_store.attempt_get(tx, task.id, task.lease_epoch)
        )

    async def attempts(self, scope: Scope, task_id: str) -> list[Attempt]:
        async def unit(tx: Tx) -> list[Attempt] | None:
            if await task_store.task_get(tx, scope, task_id) is None:
                return None
            return await attempt_store.attempt_list(tx, task_id)

        found = await self._db.read(unit)
        if found is None:
            raise NotFound("no such task")
        return found

    # -- cancel -------------------------------------------------------------------------------

    async def cancel(self, scope: Scope, task_id: str, *, reason: str | None, actor: Actor) -> Task:
        """Cancel work that has not started at once; ask running work to stop (P5)."""

        async def unit(tx: Tx) -> Task:
            return await self.cancel_in(tx, scope, task_id, reason=reason, actor=actor)

        return await self._db.run(unit)

    async def cancel_in(
        self,
        tx: Tx,
        scope: Scope,
        task_id: str,
        *,
        reason: str | None,
        actor: Actor,
        audit: bool = True,
    ) -> Task:
        """:meth:`cancel` in the caller's transaction (a workflow's cancel). ``audit`` False:
        background work (which the audit log leaves out) or a change its caller audits."""
        now = self._clock.now()
        seen = await task_store.task_get(tx, scope, task_id)
        if seen is None:
            raise NotFound("no such task")
        if seen.state in (TaskState.SCHEDULED, TaskState.PENDING, TaskState.LEASED):
            # The claim's lock order: the queue row before the task's rows.
            await queue_store.queue_lock_or_create(tx, scope, seen.queue, now)
        task = await task_store.task_get(tx, scope, task_id, lock=True)
        assert task is not None
        state = TaskState(task.state)
        if state is TaskState.CANCELLED or (state is TaskState.RUNNING and task.cancel_requested):
            return task  # already cancelled or asked: nothing more to do or to audit
        if state is TaskState.RUNNING:
            await task_store.task_request_cancel(tx, task.id, reason, now)
            tx.publish(CancelRequested(task.id, reason))
        else:
            try:
                change = transition(task, Event.CANCEL, reason=reason)
            except IllegalTransition:
                raise StateConflict(f"a {state} task cannot be cancelled") from None
            await apply(tx, [change], now)
        if audit:
            await self._audit.record(
                tx, scope=scope, actor=actor, action="task.cancel", target_kind="task",
                target_id=task.id, details={"state_before": str(state), "reason": reason},
            )  # fmt: skip
        refreshed = await task_store.task_get(tx, scope, task.id)
        assert refreshed is not None
        return refreshed

    # -- history (P10) ------------------------------------------------------------------------

    async def prune_finished(
        self, retention_ms: int, *, idempotency_ms: int | None = None, budget: int = 1000
    ) -> int:
        """Delete tasks finished longer than ``retention_ms`` ago and forget idempotency keys
        of tasks finished longer than ``idempotency_ms`` ago, at most ``budget`` rows each per
        call; answers how many rows changed (0: nothing left to do). Permit rows of keys idle
        for the retention go too."""
        now = self._clock.now()
        before = now - timedelta(milliseconds=retention_ms)
        keys_before = now - timedelta(milliseconds=idempotency_ms or retention_ms)

        async def unit(tx: Tx) -> int:
            forgotten = await task_store.idempotency_keys_expire(tx, keys_before, limit=budget)
            idle = await permit_store.key_permits_prune(tx, before, limit=budget)
            return forgotten + idle + await task_store.tasks_prune(tx, before, limit=budget)

        return await self._db.run(unit)

    # -- operator recovery (P4, P8) -----------------------------------------------------------

    async def retry(self, scope: Scope, task_id: str, *, actor: Actor) -> Task:
        """A new attempt for a failed, cancelled or needs_review task (an operator's call)."""

        async def unit(tx: Tx) -> Task:
            task = await task_store.task_get(tx, scope, task_id, lock=True)
            if task is None:
                raise NotFound("no such task")
            try:
                change = transition(task, Event.OPERATOR_RETRY)
            except IllegalTransition:
                raise StateConflict(
                    f"only failed, cancelled or needs_review tasks can be retried, not {task.state}"
                ) from None
            await apply(tx, [change], self._clock.now())
            reopened = await task_store.task_get(tx, scope, task_id)
            assert reopened is not None
            await self._audit.record(
                tx, scope=scope, actor=actor, action="task.retry", target_kind="task",
                target_id=task_id, details={"state_before": task.state},
            )  # fmt: skip
            return reopened

        return await self._db.run(unit)

    async def resolve(
        self,
        scope: Scope,
        task_id: str,
        *,
        succeeded: bool,
        result: Any,
        error: dict[str, Any] | None,
        actor: Actor,
    ) -> Task:
        """An operator's decision on work whose outcome was unknown (needs_review)."""

        async def unit(tx: Tx) -> Task:
            return await self.resolve_in(
                tx, scope, task_id, succeeded=succeeded, result=result, error=error, actor=actor
            )

        return await self._db.run(unit)

    async def resolve_in(
        self,
        tx: Tx,
        scope: Scope,
        task_id: str,
        *,
        succeeded: bool,
        result: Any,
        error: dict[str, Any] | None,
        actor: Actor,
    ) -> Task:
        """:meth:`resolve` in the caller's transaction (a workflow step's resolution)."""
        event = Event.RESOLVE_SUCCEEDED if succeeded else Event.RESOLVE_FAILED
        task = await task_store.task_get(tx, scope, task_id, lock=True)
        if task is None:
            raise NotFound("no such task")
        try:
            change = transition(task, event, result=result, error=error)
        except IllegalTransition:
            raise StateConflict(
                f"only needs_review tasks can be resolved, not {task.state}"
            ) from None
        await apply(tx, [change], self._clock.now())
        await self._audit.record(
            tx, scope=scope, actor=actor, action="task.resolve", target_kind="task",
            target_id=task_id, details={"outcome": str(change.after)},
        )  # fmt: skip
        resolved = await task_store.task_get(tx, scope, task_id)
        assert resolved is not None
        return resolved

    @staticmethod
    async def room_in(tx: Tx, scope: Scope, queues: Sequence[str]) -> dict[str, int]:
        """How many more waiting tasks each of ``queues`` takes now (only those with a
        ``max_pending``): a caller that met ``QueueFull`` creates what fits."""
        room = {}
        for name in sorted(set(queues)):
            queue = await queue_store.queue_get(tx, scope, name)
            if queue is not None and queue.max_pending is not None:
                room[name] = max(0, queue.max_pending - queue.pending)
        return room

    @staticmethod
    async def read_many_in(tx: Tx, task_ids: Sequence[str]) -> list[Task]:
        """Tasks by id (any scope: the caller knows them from their result events)."""
        return await task_store.tasks_get_many(tx, task_ids) if task_ids else []


class QueueService:
    def __init__(self, db: Database, clock: Clock, audit: AuditWriter) -> None:
        self._db = db
        self._clock = clock
        self._audit = audit

    async def list_queues(
        self, scope: Scope, *, limit: int, after: str | None, count_upto: int | None = None
    ) -> list[QueueView]:
        """Queues with their counts by state; with ``count_upto``, each count stops past it
        (a page that must answer fast however many finished tasks a queue keeps)."""

        async def unit(tx: Tx) -> list[QueueView]:
            queues = await queue_store.queue_list(tx, scope, limit=limit, after=after or "")
            return [await self._view(tx, q, count_upto) for q in queues]

        return await self._db.read(unit)

    async def get(self, scope: Scope, name: str, *, count_upto: int | None = None) -> QueueView:
        async def unit(tx: Tx) -> QueueView | None:
            queue = await queue_store.queue_get(tx, scope, name)
            return None if queue is None else await self._view(tx, queue, count_upto)

        found = await self._db.read(unit)
        if found is None:
            raise NotFound("no such queue")
        return found

    @staticmethod
    async def _view(tx: Tx, queue: Queue, count_upto: int | None = None) -> QueueView:
        if count_upto is None:
            counts = await task_store.queue_state_counts(tx, queue.scope, queue.name)
        else:
            counts = await task_store.queue_state_counts_upto(
                tx, queue.scope, queue.name, [str(s) for s in TaskState], count_upto
            )
        return QueueView(
            queue=queue,
            counts=counts,
            oldest_ready_at=await ready_store.queue_oldest_ready_at(tx, queue.scope, queue.name),
            counted_upto=count_upto,
        )

    async def update(
        self, scope: Scope, name: str, change: QueueSettings, *, actor: Actor
    ) -> QueueView:
        async def unit(tx: Tx) -> QueueView:
            now = self._clock.now()
            queue = await queue_store.queue_lock_or_create(tx, scope, name, now)
            config = queue_store.QueueConfig(
                paused=queue.paused if change.paused is None else change.paused,
                concurrency_limit=None
                if change.clear_concurrency_limit
                else change.concurrency_limit or queue.concurrency_limit,
                key_concurrency=change.key_concurrency or queue.key_concurrency,
                max_pending=None
                if change.clear_max_pending
                else change.max_pending or queue.max_pending,
            )
            await queue_store.queue_update_settings(tx, scope, name, config, now)
            if config.key_concurrency != queue.key_concurrency:
                # Each waiting key admits as many tasks as its permits now allow (or fewer).
                await admit_keys(
                    tx, scope, name, await task_store.queue_pending_keys(tx, scope, name), now
                )
            await self._audit.record(
                tx,
                scope=scope,
                actor=actor,
                action="queue.update",
                target_kind="queue",
                target_id=name,
                details=dataclasses.asdict(config),
            )
            updated = await queue_store.queue_get(tx, scope, name)
            assert updated is not None
            return await self._view(tx, updated)

        return await self._db.run(unit)


class _NotDirect(Exception):
    """The queue does not allow a direct lease now: roll back and submit as usual."""
