"""Pulse's worker-side service: the interface the WebSocket gateway calls (SPEC P2, P4–P8, D1).

Every holder write is fenced by task id + attempt (lease epoch) + lease token + session: a
stale or foreign holder never starts, renews, completes or releases anything. Every move out of
``leased``/``running`` gives the queue and key permits back and, for terminal and
``needs_review`` states, writes the result event, all in the transaction that changes the state.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from orbit_server.clock import Clock
from orbit_server.pulse import claims
from orbit_server.pulse.apply import apply, publish_milestones
from orbit_server.pulse.domain_events import Milestone
from orbit_server.pulse.effects import admit_keys, make_claimable
from orbit_server.pulse.leasing import (
    ClaimRequest,
    Lease,
    LeaseRef,
    Outcome,
    Renew,
    Renewal,
    RenewVerdict,
    Report,
    Session,
    StartAnswer,
    StartVerdict,
    Want,
    starts_eagerly,
)
from orbit_server.pulse.model import LockedTask, Task
from orbit_server.pulse.retry import RetryPolicy
from orbit_server.pulse.states import (
    TRANSITIONS,
    AttemptState,
    Event,
    SideEffect,
    TaskState,
    decide,
    failure_event,
    honour_cancel,
    lease_lost_event,
)
from orbit_server.pulse.transitions import Transition, transition
from orbit_server.scope import Scope
from orbit_server.store import Database, Tx
from orbit_server.store import attempts as attempt_store
from orbit_server.store import gates as gate_store
from orbit_server.store import tasks as task_store

__all__ = [
    "ClaimRequest",
    "Lease",
    "LeaseRef",
    "Outcome",
    "Renew",
    "RenewVerdict",
    "Renewal",
    "Report",
    "Session",
    "StartAnswer",
    "StartVerdict",
    "Want",
    "WorkerService",
]

DEEP_SCAN = claims.DEEP_SCAN


def _holds(task: Task | LockedTask, ref: LeaseRef) -> bool:
    """The fence in Python, for rows read in bulk: this lease (attempt, token and session) is
    the task's current one (what ``task_lock_fenced`` checks in SQL)."""
    return (task.lease_epoch, task.lease_token, task.session_id) == (
        ref.attempt,
        ref.lease_token,
        ref.session_id,
    )


async def _lock_fenced(tx: Tx, ref: LeaseRef) -> Task | None:
    return await task_store.task_lock_fenced(
        tx, ref.task_id, ref.attempt, ref.lease_token, ref.session_id
    )


def _starts_with(task: Task | LockedTask) -> bool:
    """Whether a report of this leased task is also its attempt's start: its delivery was
    eager — idempotent, without a gate — so the worker ran it once it had sent the start, and
    the start is recorded first, or with the result when it was not yet (decisions 0007,
    0008)."""
    return task.state == TaskState.LEASED and starts_eagerly(task)


def _expired(task: Task | LockedTask, now: datetime) -> bool:
    """A lease whose time is up no longer holds, even before recovery has processed it."""
    return task.lease_expires_at is None or task.lease_expires_at <= now


class WorkerService:
    def __init__(self, db: Database, clock: Clock, *, lease_ms: int) -> None:
        self._db = db
        self._clock = clock
        self._lease = timedelta(milliseconds=lease_ms)
        self._claims = claims.Claims(db, clock, lease=self._lease)

    # -- claim (pulse/claims.py) ------------------------------------------------------------

    async def has_ready(self, scope: Scope, queue: str) -> bool:
        """Whether the queue may have claimable work: the dispatch loop's cheap poll."""
        return await self._claims.has_ready(scope, queue)

    async def claim(
        self, scope: Scope, session: Session, wants: Sequence[Want], *, limit: int
    ) -> list[Lease]:
        """Lease up to ``limit`` tasks for the session's free capacity, in one transaction."""
        request = ClaimRequest(session, tuple(wants), limit)
        [leases] = await self._claims.claim_many(scope, [request])
        return leases

    async def claim_many(self, scope: Scope, requests: Sequence[ClaimRequest]) -> list[list[Lease]]:
        """Claims for several sessions (one node's connections) in one transaction; each
        session's leases carry their own token."""
        return await self._claims.claim_many(scope, requests)

    # -- start, renew -------------------------------------------------------------------------

    async def start(self, ref: LeaseRef) -> StartVerdict:
        """Confirm the start of a leased task; the gate is checked under its shared lock."""
        [answer] = await self.start_many([ref])
        return answer.verdict

    async def start_many(self, refs: Sequence[LeaseRef]) -> list[StartAnswer]:
        """Confirm the starts of many leased tasks in one transaction, a verdict each. Asking
        again for an attempt that already started (its answer was lost) answers ``started``."""

        async def unit(tx: Tx) -> list[StartAnswer]:
            now = self._clock.now()
            answers: dict[int, StartAnswer] = await self._start_together(tx, refs, now)
            for i, ref in enumerate(refs):
                if i not in answers:
                    answers[i] = await self._start_one(tx, ref, now)
            return [answers[i] for i in range(len(refs))]

        return await self._db.run(unit)

    async def _start_together(
        self, tx: Tx, refs: Sequence[LeaseRef], now: datetime
    ) -> dict[int, StartAnswer]:
        """The common case in bulk: leased tasks whose leases hold and whose gate (if any) is
        open start together, a few statements per distinct timeout; the gates are read in one
        statement under their shared lock, after the tasks' rows (the order of a single
        start). Answers the indexes it handled; the rest go one by one."""
        rows = await task_store.tasks_lock_many(tx, [r.task_id for r in refs])
        candidates: list[tuple[int, LockedTask]] = []
        seen: set[str] = set()
        for i, ref in enumerate(refs):
            task = rows.get(ref.task_id)
            if (
                task is not None
                and task.id not in seen
                and _holds(task, ref)
                and task.state == TaskState.LEASED
                and not _expired(task, now)
            ):
                candidates.append((i, task))
                seen.add(task.id)
        gates = await gate_store.gates_open(
            tx, [g for _, t in candidates if (g := t.gate_id) is not None]
        )
        groups: dict[int, list[int]] = defaultdict(list)  # timeout → indexes
        for i, held in candidates:
            if held.gate_id is None or gates[held.gate_id]:
                decide(TaskState.LEASED, Event.START)
                groups[held.timeout_ms].append(i)
        answers: dict[int, StartAnswer] = {}
        for timeout_ms, indexes in sorted(groups.items()):
            expires_at, deadline = self._started_lease(now, timeout_ms)
            await task_store.tasks_start_many(
                tx, [refs[i].task_id for i in indexes], expires_at=expires_at,
                deadline_at=deadline, now=now,
            )  # fmt: skip
            for i in indexes:
                answers[i] = StartAnswer(refs[i], StartVerdict.STARTED, expires_at, deadline)
        started = Counter((held.queue, Milestone.STARTED) for i, held in candidates if i in answers)
        publish_milestones(tx, started)
        return answers

    def _started_lease(self, now: datetime, timeout_ms: int) -> tuple[datetime, datetime]:
        """A started attempt's lease end and deadline: the lease never reaches past it."""
        deadline = now + timedelta(milliseconds=timeout_ms)
        return min(now + self._lease, deadline), deadline

    async def _start_one(self, tx: Tx, ref: LeaseRef, now: datetime) -> StartAnswer:
        task = await _lock_fenced(tx, ref)
        if task is None or _expired(task, now):
            return StartAnswer(ref, StartVerdict.STALE)
        if task.state == TaskState.RUNNING:  # a repeated start of this very attempt
            return StartAnswer(ref, StartVerdict.STARTED, task.lease_expires_at, task.deadline_at)
        if task.state != TaskState.LEASED:
            return StartAnswer(ref, StartVerdict.STALE)
        if task.gate_id is not None:
            gates = await gate_store.gates_open(tx, [task.gate_id])
            if not gates[task.gate_id]:
                await apply(
                    tx, [transition(task, Event.START_DENIED_GATE, cause="gate_closed")], now
                )
                return StartAnswer(ref, StartVerdict.DENIED_GATE)
        expires_at, deadline = await self._record_start(tx, task, ref, now)
        return StartAnswer(ref, StartVerdict.STARTED, expires_at, deadline)

    async def _record_start(
        self, tx: Tx, task: Task, ref: LeaseRef, now: datetime
    ) -> tuple[datetime, datetime]:
        """A leased task (locked, fenced, its gate checked) starts: the lease end and deadline."""
        decide(TaskState.LEASED, Event.START)
        expires_at, deadline = self._started_lease(now, task.timeout_ms)
        start = task_store.TaskStart(task.id, ref.attempt, ref.lease_token, expires_at, deadline)
        await task_store.task_set_running(tx, start, now)
        await attempt_store.attempts_update_many(tx, [attempt_store.AttemptUpdate(
            task.id, ref.attempt, AttemptState.RUNNING, started_at=now,
            lease_expires_at=expires_at,
        )])  # fmt: skip
        publish_milestones(tx, {(task.queue, Milestone.STARTED): 1})
        return expires_at, deadline

    async def renew(self, items: Sequence[LeaseRef | Renew]) -> list[Renewal]:
        """Extend many leases in one transaction; a verdict per item (fenced): one statement
        locks the rows, one extends those whose lease still holds. The progress items carry
        is recorded on their attempts when the lease holds, in a deferred write that goes
        with the extension (no round trip of its own)."""
        if not items:
            return []
        renews = [item if isinstance(item, Renew) else Renew(item) for item in items]
        refs = [r.ref for r in renews]

        async def unit(tx: Tx) -> list[Renewal]:
            now = self._clock.now()
            expires_at = now + self._lease
            rows = await task_store.tasks_lock_many(tx, [r.task_id for r in refs])
            held = {
                ref
                for ref in refs
                if (task := rows.get(ref.task_id)) is not None
                and _holds(task, ref)
                and task.state in (TaskState.LEASED, TaskState.RUNNING)
                and not _expired(task, now)
            }
            await attempt_store.attempts_progress_set(
                tx,
                [
                    attempt_store.ProgressReport(r.ref.task_id, r.ref.attempt, r.progress)
                    for r in renews
                    if r.progress is not None and r.ref in held
                ],
                now,
            )
            await task_store.tasks_renew_many(tx, [r.task_id for r in held], expires_at, now)
            out: list[Renewal] = []
            for ref in refs:
                task = rows[ref.task_id] if ref in held else None
                if task is None:
                    out.append(Renewal(ref, RenewVerdict.STALE, None))
                    continue
                ends = expires_at
                if task.deadline_at is not None and task.deadline_at < ends:
                    ends = task.deadline_at  # a lease never reaches past the deadline
                verdict = (
                    RenewVerdict.CANCEL_REQUESTED if task.cancel_requested else RenewVerdict.RENEWED
                )
                out.append(Renewal(ref, verdict, ends))
            return out

        return await self._db.run(unit)

    # -- results ------------------------------------------------------------------------------

    async def complete(self, ref: LeaseRef, result: Any) -> Outcome:
        [outcome] = await self.report_many([Report(ref, Event.COMPLETE, result=result)])
        return outcome

    async def fail(self, ref: LeaseRef, error: dict[str, Any], *, retryable: bool) -> Outcome:
        [outcome] = await self.report_many([Report(ref, None, error=error, retryable=retryable)])
        return outcome

    async def report_cancelled(self, ref: LeaseRef) -> Outcome:
        [outcome] = await self.report_many([Report(ref, Event.CANCELLED_BY_WORKER)])
        return outcome

    async def report_many(self, reports: Sequence[Report]) -> list[Outcome]:
        """Record many workers' results in one transaction, an outcome each (fenced). Task rows
        are locked in id order first, then handled queue by queue, so that concurrent batches
        take rows in one order."""
        if not reports:
            return []

        freeing: list[asyncio.Future[None]] = []

        async def unit(tx: Tx) -> list[Outcome]:
            now = self._clock.now()
            rows = await task_store.tasks_lock_many(tx, [r.ref.task_id for r in reports])
            locked: list[LockedTask | None] = []
            for report in reports:  # fenced: the row only if this lease still holds it
                task = rows.get(report.ref.task_id)
                locked.append(task if task is not None and _holds(task, report.ref) else None)
            # The room these results free, for a claim of this node to plan with (0011).
            counts: dict[tuple[Scope, str], int] = defaultdict(int)
            for row in {t.id: t for t in locked if t is not None}.values():
                if row.state in (TaskState.LEASED, TaskState.RUNNING):
                    counts[(row.scope, row.queue)] += 1
            for ended in freeing:  # a rerun: the earlier try ended
                self._claims.results_ended(ended)
            freeing[:] = [self._claims.results_started(counts)]
            outcomes: list[Outcome] = [Outcome.STALE] * len(reports)
            done = await self._succeed_together(tx, reports, locked, now)
            for i in done:
                outcomes[i] = Outcome.ACCEPTED

            def queue_order(i: int) -> tuple[str, str]:
                task = locked[i]
                return ("" if task is None else task.queue, reports[i].ref.task_id)

            rest = [i for i in range(len(reports)) if i not in done]
            for i in sorted(rest, key=queue_order):
                ref = reports[i].ref  # read again: an earlier item may have changed the row
                fresh = await _lock_fenced(tx, ref)
                eager = fresh is not None and _starts_with(fresh)
                if fresh is not None and eager and not _expired(fresh, now):
                    await self._record_start(tx, fresh, ref, now)  # an eager attempt's start
                    fresh = await _lock_fenced(tx, ref)
                outcomes[i] = await self._report_locked(tx, reports[i], fresh, now)
            return outcomes

        try:
            return await self._db.run(unit)
        finally:
            for ended in freeing:
                self._claims.results_ended(ended)

    async def _succeed_together(
        self,
        tx: Tx,
        reports: Sequence[Report],
        locked: Sequence[LockedTask | None],
        now: datetime,
    ) -> set[int]:
        """The common case in bulk: successes of running attempts whose leases hold, and of
        eager attempts whose report is their start too. The same transition for every one of
        them (→ ``succeeded``, permits back, a result event), written set by set. Answers the
        indexes it handled."""
        picked: list[int] = []
        changes: list[Transition] = []
        seen: set[str] = set()  # a report sent twice in one batch: the second one waits
        for i, (report, task) in enumerate(zip(reports, locked, strict=True)):
            if (
                report.event is not Event.COMPLETE
                or task is None
                or task.id in seen
                or _expired(task, now)
                or not (task.state == TaskState.RUNNING or _starts_with(task))
            ):
                continue  # (a leased task succeeds here only as an eager attempt, 0008)
            picked.append(i)
            changes.append(transition(task, Event.COMPLETE, result=report.result))
            seen.add(task.id)
        await apply(tx, changes, now)
        return set(picked)

    async def _report_locked(
        self, tx: Tx, report: Report, task: Task | None, now: datetime
    ) -> Outcome:
        if task is None or task.state != TaskState.RUNNING:
            return await self._already(tx, report.ref, task)
        if _expired(task, now):
            return Outcome.STALE  # the lease ended first: recovery decides, not this report
        error = report.error
        chosen = report.event or failure_event(
            report.retryable,
            self._policy(task).attempts_left(task.attempts),
            SideEffect(task.side_effect),
            safe_to_retry=bool((error or {}).get("safe_to_retry", False)),
        )
        await apply(tx, [self._ending(task, chosen, now, result=report.result, error=error)], now)
        return Outcome.ACCEPTED

    @staticmethod
    async def _already(tx: Tx, ref: LeaseRef, task: Task | None) -> Outcome:
        """A result for an attempt that is not running: acknowledge the resend of a report
        this attempt already made; refuse anything else (expired, re-claimed, never started)."""
        if task is None or task.state in (TaskState.LEASED, TaskState.RUNNING):
            return Outcome.STALE
        attempt = await attempt_store.attempt_get(tx, ref.task_id, ref.attempt)
        if attempt is None or attempt.ended_at is None:
            return Outcome.STALE
        reported = attempt.cause in ("completed", "cancelled", "error")
        return Outcome.ALREADY if reported else Outcome.STALE

    def _ending(
        self,
        task: Task,
        event: Event,
        now: datetime,
        *,
        result: Any = None,
        error: dict[str, Any] | None = None,
        cause: str | None = None,
    ) -> Transition:
        """How a running attempt ends on ``event``: a cancel asked for is honoured, a retry
        waits out the task's backoff."""
        event = honour_cancel(event, task.cancel_requested)
        run_at = None
        if TRANSITIONS[(TaskState.RUNNING, event)] is TaskState.SCHEDULED:
            delay = self._policy(task).backoff_ms(task.attempts)
            run_at = now + timedelta(milliseconds=delay)
        return transition(task, event, result=result, error=error, cause=cause, run_at=run_at)

    @staticmethod
    def _policy(task: Task) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=task.max_attempts,
            initial_backoff_ms=task.initial_backoff_ms,
            backoff_multiplier=task.backoff_multiplier,
            max_backoff_ms=task.max_backoff_ms,
        )

    # -- release, reconnect -------------------------------------------------------------------

    async def release(self, refs: Sequence[LeaseRef]) -> list[bool]:
        """Give back leased work that has not started (drain); True where it was released."""

        async def unit(tx: Tx) -> list[bool]:
            now = self._clock.now()
            out = []
            changes: list[Transition] = []
            for ref in refs:
                task = await _lock_fenced(tx, ref)
                if task is None or task.state != TaskState.LEASED or _expired(task, now):
                    out.append(False)
                    continue
                changes.append(transition(task, Event.RELEASE, cause="released"))
                out.append(True)
            await apply(tx, changes, now)  # all of them together
            return out

        return await self._db.run(unit)

    async def session_leases(self, session_id: str) -> list[task_store.HeldLease]:
        async def unit(tx: Tx) -> list[task_store.HeldLease]:
            return await task_store.session_leases(tx, session_id)

        return await self._db.read(unit)

    # -- recovery (lease expiry, due tasks) ---------------------------------------------------

    async def expire_leases(self, *, limit: int = 200) -> int:
        """One bounded pass over leases that ended: unstarted work returns to pending, started
        idempotent work retries (or fails), started unsafe work goes to needs_review (P4)."""

        async def unit(tx: Tx) -> int:
            now = self._clock.now()
            changes: list[Transition] = []
            for task_id, scope in await task_store.leases_expired(tx, now, limit=limit):
                task = await task_store.task_get(tx, scope, task_id, lock=True)
                if task is None or task.lease_expires_at is None or task.lease_expires_at > now:
                    continue
                if task.state == TaskState.LEASED:
                    changes.append(
                        transition(task, Event.LEASE_EXPIRED_UNSTARTED, cause="lease_expired")
                    )
                elif task.state == TaskState.RUNNING:
                    event = lease_lost_event(
                        SideEffect(task.side_effect),
                        self._policy(task).attempts_left(task.attempts),
                    )
                    timed_out = task.deadline_at is not None and task.deadline_at <= now
                    unknown = event is Event.OUTCOME_UNKNOWN
                    error = {
                        "code": "timeout" if timed_out and not unknown else "outcome_unknown",
                        "message": f"the attempt ran past its timeout of {task.timeout_ms} ms"
                        if timed_out
                        else "the worker's lease ended before it reported a result",
                        "retryable": event is not Event.OUTCOME_UNKNOWN,
                    }
                    cause = "timeout" if timed_out else "lease_expired"
                    changes.append(self._ending(task, event, now, error=error, cause=cause))
            await apply(tx, changes, now)  # the whole pass in a few statements
            return len(changes)

        return await self._db.run(unit)

    async def promote_due(self, *, limit: int = 500) -> int:
        """Move scheduled tasks whose time has come into the claim range."""

        async def unit(tx: Tx) -> int:
            now = self._clock.now()
            due = await task_store.scheduled_due(tx, now, limit=limit)
            if not due:
                return 0
            await task_store.tasks_set_pending_many(tx, [t.id for t in due], now)
            keys: dict[tuple[Scope, str], set[str]] = defaultdict(set)
            for task in due:
                if task.concurrency_key is None:
                    await make_claimable(tx, task, now=now)
                else:
                    keys[(task.scope, task.queue)].add(task.concurrency_key)
            for (scope, queue), of_queue in sorted(keys.items()):  # one order on every node
                await admit_keys(tx, scope, queue, of_queue, now)
            return len(due)

        return await self._db.run(unit)
