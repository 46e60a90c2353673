"""Bulk operations on tasks (decision 0025): the selection of tasks by filter, and what each
action does to a batch of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orbit_server.clock import Clock
from orbit_server.errors import StateConflict
from orbit_server.pulse.apply import apply
from orbit_server.pulse.bulk import AfterCommit, Skip, TooMany, settle
from orbit_server.pulse.domain_events import CancelRequested
from orbit_server.pulse.model import BulkRecord, SelectedTask, Settled, Task, TaskSelection
from orbit_server.pulse.states import Event, IllegalTransition, TaskState
from orbit_server.pulse.transitions import Transition, transition
from orbit_server.scope import Scope
from orbit_server.store import Tx
from orbit_server.store import bulk as bulk_store
from orbit_server.store import queues as queue_store
from orbit_server.store import tasks as task_store

TASK_ACTIONS = ("cancel", "retry", "resolve", "set_priority", "move_run_at")
SET_WISE = frozenset({"cancel", "retry", "resolve"})  # applied as transitions, a batch at once
UNSTARTED = (TaskState.SCHEDULED, TaskState.PENDING, TaskState.LEASED)
SELECT_PAGE = 2000
SCANNED_MOST = 1_000_000  # rows a label or error-code filter may read to find its tasks


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """Which tasks an operation acts on. Every given field must match."""

    selection: TaskSelection
    label: tuple[str, str] | None = None
    error_code: str | None = None

    @property
    def kind(self) -> str:
        return "tasks"

    def keeps(self, task: SelectedTask) -> bool:
        if self.label is not None and task.labels.get(self.label[0]) != self.label[1]:
            return False
        return self.error_code is None or task.error_code == self.error_code

    async def select(self, tx: Tx, scope: Scope, cap: int) -> list[str]:
        """The column filters in SQL, by id pages; label and error code on each page."""
        ids: list[str] = []
        after = ""
        read = 0
        while True:
            page = await bulk_store.tasks_select(
                tx, scope, self.selection, after=after, limit=SELECT_PAGE
            )
            read += len(page)
            ids += [t.id for t in page if self.keeps(t)]
            if len(ids) > cap or read > SCANNED_MOST:
                raise TooMany(cap, "by queue, state, type or time")
            if len(page) < SELECT_PAGE:
                return ids
            after = page[-1].id


class TaskBulk:
    """The task actions: cancel, retry and resolve as transitions written set-wise
    (decision 0019); priority and run time as guarded updates, one task at a time."""

    actions = TASK_ACTIONS
    batch: int | None = None  # a batch's transitions are decided before anything is written

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    async def apply(
        self, tx: Tx, op: BulkRecord, items: Sequence[tuple[int, str]]
    ) -> tuple[list[Settled], AfterCommit | None]:
        if op.action in SET_WISE:
            return await self._transitions(tx, op, items), None
        settled = []
        for seq, task_id in items:
            try:
                await self._update(tx, op, task_id)
            except Exception as exc:  # settle() raises again what is not the item's
                settled.append(settle(seq, exc))
            else:
                settled.append(settle(seq, None))
        return settled, None

    async def _transitions(
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
            except Skip as skip:
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
            raise Skip("already_cancelled")
        return transition(task, Event.CANCEL, reason=params.get("reason"))

    async def _update(self, tx: Tx, op: BulkRecord, task_id: str) -> None:
        now = self._clock.now()
        if op.action == "set_priority":
            if not await bulk_store.task_set_priority(tx, task_id, int(op.params["priority"]), now):
                raise StateConflict("only scheduled or pending tasks change priority")
        elif op.action == "move_run_at":
            run_at = datetime.fromisoformat(str(op.params["run_at"]))
            if not await bulk_store.task_move_run_at(tx, task_id, run_at, now):
                raise StateConflict("only scheduled tasks move their run time")
