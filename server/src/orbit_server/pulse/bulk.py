"""Bulk operations on tasks (decision 0025): an operator's action over every task a filter
matches, frozen at the start and applied in bounded batches in the background.

- **Frozen selection.** ``start`` reads the matching ids and stores them, with the operation
  and its one audit record, in one transaction: a task that enters the filter later is never
  touched. A dry run reads the same selection and writes nothing.
- **Exactly once per task.** Each step locks one running operation (``SKIP LOCKED``: nodes step
  different operations side by side), applies the action to its next pending items and
  settles each item in the same transaction. A node that dies mid-step leaves the step
  uncommitted; another node's step does it again, whole.
- **What each item becomes.** ``done``; ``skipped`` with a reason (``state_conflict``: the
  task's state no longer allows the action; ``already_cancelled``; ``not_found``: pruned
  meanwhile; ``queue_full``);
  ``failed`` with the error code. The counts and the reasons add up on the operation.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orbit_server.audit import Actor, AuditWriter
from orbit_server.clock import Clock
from orbit_server.errors import (
    InvalidRequest,
    NotFound,
    OrbitError,
    QueueFull,
    StateConflict,
    TransientError,
)
from orbit_server.ids import new_id
from orbit_server.pulse.apply import apply
from orbit_server.pulse.domain_events import CancelRequested
from orbit_server.pulse.model import (
    BulkItem,
    BulkRecord,
    SelectedTask,
    Settled,
    Task,
    TaskSelection,
)
from orbit_server.pulse.states import Event, IllegalTransition, TaskState
from orbit_server.pulse.transitions import Transition, transition
from orbit_server.scope import Scope
from orbit_server.store import Database, Tx
from orbit_server.store import bulk as bulk_store
from orbit_server.store import queues as queue_store
from orbit_server.store import tasks as task_store

BULK_MAX_TARGETS = 100_000  # tasks one operation may select
SET_WISE = frozenset({"cancel", "retry", "resolve"})  # applied as transitions, a batch at once
UNSTARTED = (TaskState.SCHEDULED, TaskState.PENDING, TaskState.LEASED)
TASK_ACTIONS = ("cancel", "retry", "resolve", "set_priority", "move_run_at")
SELECT_PAGE = 2000
SAMPLE = 10


class _Skip(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """Which tasks an operation acts on. Every given field must match."""

    selection: TaskSelection
    label: tuple[str, str] | None = None
    error_code: str | None = None

    def keeps(self, task: SelectedTask) -> bool:
        if self.label is not None and task.labels.get(self.label[0]) != self.label[1]:
            return False
        return self.error_code is None or task.error_code == self.error_code


@dataclass(frozen=True, slots=True)
class DryRun:
    matched: int
    sample: list[str]  # the first matching task ids


class BulkService:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        audit: AuditWriter,
        *,
        max_targets: int,
        batch: int = 200,
    ) -> None:
        self._db = db
        self._clock = clock
        self._audit = audit
        self._max_targets = max_targets
        self._batch = batch
        self.started = asyncio.Event()  # an operation was recorded on this node

    async def _select(self, tx: Tx, scope: Scope, what: TaskFilter) -> list[str]:
        ids: list[str] = []
        after = ""
        while True:
            page = await bulk_store.tasks_select(
                tx, scope, what.selection, after=after, limit=SELECT_PAGE
            )
            ids += [t.id for t in page if what.keeps(t)]
            if len(ids) > self._max_targets:
                raise InvalidRequest(
                    f"the filter matches more than {self._max_targets} tasks; narrow it "
                    "by queue, state, type or time"
                )
            if len(page) < SELECT_PAGE:
                return ids
            after = page[-1].id

    async def dry_run(self, scope: Scope, what: TaskFilter) -> DryRun:
        """How many tasks the filter matches now, and the first few; nothing changes."""

        async def unit(tx: Tx) -> DryRun:
            ids = await self._select(tx, scope, what)
            return DryRun(len(ids), ids[:SAMPLE])

        return await self._db.read(unit)

    async def start(
        self,
        scope: Scope,
        *,
        action: str,
        what: TaskFilter,
        filter_doc: dict[str, Any],
        params: dict[str, Any],
        actor: Actor,
    ) -> BulkRecord:
        """Freeze the selection and record the operation; the background steps apply it."""
        if action not in TASK_ACTIONS:
            raise InvalidRequest(f"action must be one of {', '.join(TASK_ACTIONS)}")
        op_id = new_id("bulk_")

        async def unit(tx: Tx) -> BulkRecord:
            ids = await self._select(tx, scope, what)
            await bulk_store.bulk_insert(
                tx, op_id=op_id, scope=scope, kind="tasks", action=action, filter_=filter_doc,
                params=params, targets=ids, created_by=actor.name, now=self._clock.now(),
            )  # fmt: skip
            await self._audit.record(
                tx, scope=scope, actor=actor, action=f"tasks.bulk.{action}",
                target_kind="bulk_operation", target_id=op_id,
                details={"filter": filter_doc, "params": params, "matched": len(ids)},
            )  # fmt: skip
            found = await bulk_store.bulk_get(tx, scope, op_id)
            assert found is not None
            return found

        op = await self._db.run(unit)
        self.started.set()
        return op

    async def get(self, scope: Scope, op_id: str) -> BulkRecord:
        found = await self._db.read(lambda tx: bulk_store.bulk_get(tx, scope, op_id))
        if found is None:
            raise NotFound("no such bulk operation")
        return found

    async def list_operations(
        self, scope: Scope, *, before: str | None, limit: int
    ) -> list[BulkRecord]:
        return await self._db.read(
            lambda tx: bulk_store.bulk_list(tx, scope, before=before or "~", limit=limit)
        )

    async def items(self, scope: Scope, op_id: str, *, after: int, limit: int) -> list[BulkItem]:
        async def unit(tx: Tx) -> list[BulkItem] | None:
            if await bulk_store.bulk_get(tx, scope, op_id) is None:
                return None
            return await bulk_store.bulk_items_list(tx, op_id, after=after, limit=limit)

        found = await self._db.read(unit)
        if found is None:
            raise NotFound("no such bulk operation")
        return found

    async def cancel(self, scope: Scope, op_id: str, *, actor: Actor) -> BulkRecord:
        """Stop a running operation: items not applied yet stay pending, for good."""

        async def unit(tx: Tx) -> BulkRecord:
            op = await bulk_store.bulk_get(tx, scope, op_id, lock=True)
            if op is None:
                raise NotFound("no such bulk operation")
            if op.state != bulk_store.RUNNING:
                raise StateConflict(f"the operation is {op.state}, not running")
            await bulk_store.bulk_progress(
                tx, op, done=0, skipped=0, failed=0, skipped_reasons=op.skipped_reasons,
                state="cancelled", now=self._clock.now(),
            )  # fmt: skip
            await self._audit.record(
                tx, scope=scope, actor=actor, action="tasks.bulk.cancel_operation",
                target_kind="bulk_operation", target_id=op_id,
                details={"done": op.done, "matched": op.matched},
            )  # fmt: skip
            found = await bulk_store.bulk_get(tx, scope, op_id)
            assert found is not None
            return found

        return await self._db.run(unit)

    async def step(self) -> int:
        """Apply the next batch of the oldest running operation that no other node steps now;
        answers how many items it settled (0: nothing to do)."""

        async def unit(tx: Tx) -> int:
            op = await bulk_store.bulk_next_running(tx)
            if op is None:
                return 0
            items = await bulk_store.bulk_items_pending(tx, op.id, limit=self._batch)
            if op.action in SET_WISE:
                settled = await self._apply_set(tx, op, items)
            else:
                actor = Actor(f"bulk:{op.id}")
                settled = [await self._apply(tx, op, seq, target, actor) for seq, target in items]
            await bulk_store.bulk_items_settle(tx, op.id, settled)
            counts = Counter(s.state for s in settled)
            reasons = Counter(op.skipped_reasons)
            reasons.update(s.reason for s in settled if s.state == "skipped" and s.reason)
            await bulk_store.bulk_progress(
                tx, op, done=counts["done"], skipped=counts["skipped"], failed=counts["failed"],
                skipped_reasons=dict(reasons),
                state="running" if len(items) == self._batch else "completed",
                now=self._clock.now(),
            )  # fmt: skip
            return max(1, len(settled))

        return await self._db.run(unit)

    async def _apply_set(
        self, tx: Tx, op: BulkRecord, items: Sequence[tuple[int, str]]
    ) -> list[Settled]:
        """Cancel, retry or resolve a batch as transitions (decision 0019): the rows locked in
        one statement (after their queues' rows, the claim's lock order), one transition
        each, written by one ``apply``."""
        scope, params, now = op.scope, op.params, self._clock.now()
        ids = [task_id for _, task_id in items]
        if op.action == "cancel":
            seen = await task_store.tasks_get_many(tx, ids)
            for queue in sorted({t.queue for t in seen if t.state in UNSTARTED}):
                await queue_store.queue_lock_or_create(tx, scope, queue, now)
        locked = await bulk_store.tasks_lock_batch(tx, scope, ids)
        changes: list[Transition] = []
        running: list[str] = []  # their cancel is a request to the worker
        settled = []
        for seq, task_id in items:
            task = locked.get(task_id)
            if task is None:
                settled.append(Settled(seq, "skipped", "not_found"))
                continue
            if op.action == "cancel" and task.state == TaskState.RUNNING:
                if task.cancel_requested:
                    settled.append(Settled(seq, "skipped", "already_cancelled"))
                else:
                    running.append(task_id)
                    settled.append(Settled(seq, "done", None))
                continue
            try:
                change = self._decide(task, op.action, params)
            except _Skip as skip:
                settled.append(Settled(seq, "skipped", skip.reason))
                continue
            except IllegalTransition:
                settled.append(Settled(seq, "skipped", "state_conflict"))
                continue
            changes.append(change)
            settled.append(Settled(seq, "done", None))
        await apply(tx, changes, now)
        for task_id in running:
            await task_store.task_request_cancel(tx, task_id, params.get("reason"), now)
            tx.publish(CancelRequested(task_id, params.get("reason")))
        return settled

    @staticmethod
    def _decide(task: Task, action: str, params: dict[str, Any]) -> Transition:
        """The transition ``action`` makes of a task that is not running."""
        if action == "retry":
            return transition(task, Event.OPERATOR_RETRY)
        if action == "resolve":
            succeeded = params["outcome"] == "succeeded"
            event = Event.RESOLVE_SUCCEEDED if succeeded else Event.RESOLVE_FAILED
            return transition(task, event, result=params.get("result"), error=params.get("error"))
        if task.state == TaskState.CANCELLED:
            raise _Skip("already_cancelled")
        return transition(task, Event.CANCEL, reason=params.get("reason"))

    async def _apply(self, tx: Tx, op: BulkRecord, seq: int, task_id: str, actor: Actor) -> Settled:
        try:
            await self._act(tx, op, task_id, actor)
        except _Skip as skip:
            return Settled(seq, "skipped", skip.reason)
        except StateConflict:
            return Settled(seq, "skipped", "state_conflict")
        except NotFound:
            return Settled(seq, "skipped", "not_found")
        except QueueFull:
            return Settled(seq, "skipped", "queue_full")
        except TransientError:
            raise  # the database: the whole step is done again later
        except OrbitError as exc:
            return Settled(seq, "failed", exc.code)
        return Settled(seq, "done", None)

    async def _act(self, tx: Tx, op: BulkRecord, task_id: str, actor: Actor) -> None:
        now = self._clock.now()
        if op.action == "set_priority":
            if not await bulk_store.task_set_priority(tx, task_id, int(op.params["priority"]), now):
                raise StateConflict("only scheduled or pending tasks change priority")
        elif op.action == "move_run_at":
            run_at = datetime.fromisoformat(str(op.params["run_at"]))
            if not await bulk_store.task_move_run_at(tx, task_id, run_at, now):
                raise StateConflict("only scheduled tasks move their run time")
