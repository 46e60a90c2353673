"""Weave's background work (SPEC W3 boundary 2, W9): consume the result events of step tasks
and act on due waits, on every node, in bounded passes.

Result events: the pending events of tasks owned by workflows are read in order and handled
per instance, one transaction each: every event is marked processed (conditionally: a
duplicate or another node's earlier handling changes nothing), the instance is locked, the
step execution that still names the task records the outcome and the instance follows it. A
crash before the commit leaves the events pending for the next pass, on this node or another.

Waits: steps with a due ``wake_at`` (timers, signal timeouts, poll intervals, entries past the
work cap, map refills) are taken oldest first and advanced the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Awaitable, Callable
from datetime import datetime

import structlog

from orbit_server.clock import Clock
from orbit_server.errors import NotFound, TransientError
from orbit_server.pulse.events import EventConsumer
from orbit_server.pulse.service import TaskService
from orbit_server.store import Database, Tx
from orbit_server.store import weave as store
from orbit_server.store.pulse import TaskEventRecord
from orbit_server.weave.advance import Advance
from orbit_server.weave.definition import MapStep, PollStep, SignalStep, TimerStep
from orbit_server.weave.engine import Outcome, StepState
from orbit_server.weave.service import WorkflowService

log = structlog.get_logger("orbit.weave")

OWNER = "workflow"


class Runner:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        tasks: TaskService,
        workflows: WorkflowService,
        *,
        batch: int = 200,
    ) -> None:
        self._db = db
        self._clock = clock
        self._tasks = tasks
        self._workflows = workflows
        self._events = EventConsumer(db, clock)
        self.batch = batch

    # -- result events ------------------------------------------------------------------------

    async def consume(self) -> int:
        """One pass over pending workflow events; answers how many this pass handled."""

        async def read(tx: Tx) -> list[TaskEventRecord]:
            return await self._events.pending_owned(tx, OWNER, limit=self.batch)

        events = await self._db.read(read)
        by_instance: dict[str, list[TaskEventRecord]] = defaultdict(list)
        for event in events:
            if event.owner_id is not None:
                by_instance[event.owner_id].append(event)
        handled = 0
        for workflow_id, group in by_instance.items():
            handled += await self._consume_group(workflow_id, group)
        return handled

    async def _consume_group(self, workflow_id: str, group: list[TaskEventRecord]) -> int:
        async def act(advance: Advance) -> int:
            count = 0
            for event in group:
                if not await self._events.mark_in(advance.tx, event):
                    continue  # handled already (a duplicate, another node)
                count += 1
                if advance.finished:
                    continue
                task = await self._tasks.read_in(advance.tx, event.scope, event.task_id)
                if task is None or task.owner_step is None:
                    continue
                row = await advance.row(task.owner_step)
                if (
                    row is None
                    or row.task_id != task.id
                    or row.state not in (StepState.RUNNING, StepState.NEEDS_REVIEW)
                ):
                    continue  # a stale task: cancelled, skipped or retried since
                await advance.task_ended(row, task)
            return count

        try:
            count, _ = await self._workflows.run_locked(None, workflow_id, act)
        except NotFound:  # the instance is gone (retention): mark its events only
            return await self._mark_only(group)
        return count

    async def _mark_only(self, group: list[TaskEventRecord]) -> int:
        async def unit(tx: Tx) -> int:
            return sum([await self._events.mark_in(tx, e) for e in group])

        return await self._db.run(unit)

    # -- waits --------------------------------------------------------------------------------

    async def wake_due(self) -> int:
        """One pass over due waits; answers how many it handled."""
        now = self._clock.now()

        async def read(tx: Tx) -> list[tuple[str, str]]:
            return await store.workflow_steps_due(tx, now, limit=self.batch)

        due = await self._db.read(read)
        by_instance: dict[str, list[str]] = defaultdict(list)
        for workflow_id, key in due:
            by_instance[workflow_id].append(key)
        for workflow_id, keys in by_instance.items():
            with contextlib.suppress(NotFound):
                await self._workflows.run_locked(None, workflow_id, _waker(keys))
        return len(due)

    async def next_wake(self) -> datetime | None:
        async def read(tx: Tx) -> datetime | None:
            return await store.workflow_steps_next_wake(tx)

        return await self._db.read(read)


def _waker(keys: list[str]) -> Callable[[Advance], Awaitable[None]]:
    async def act(advance: Advance) -> None:
        for key in keys:
            row = await advance.row(key)
            if row is None or row.wake_at is None or row.wake_at > advance.now:
                continue  # changed meanwhile
            if advance.finished:
                advance.put(row, wake_at=None)
                continue
            if advance.paused:
                advance.put(row, wake_at=None)  # parked; resume re-arms it
                continue
            step = advance.definition.steps[row.step]
            if row.state == StepState.PENDING:
                await advance.begin(row)
            elif row.state == StepState.WAITING and isinstance(step, TimerStep):
                await advance.complete(row, Outcome.SUCCEEDED)
            elif row.state == StepState.WAITING and isinstance(step, SignalStep):
                error = {
                    "code": "signal_timeout",
                    "message": f"no signal {step.name!r} came in time",
                    "step": row.key,
                }
                await advance.complete(row, Outcome.TIMED_OUT, error=error)
            elif row.state == StepState.WAITING and isinstance(step, PollStep):
                await advance.next_round(row)
            elif row.state == StepState.RUNNING and isinstance(step, MapStep):
                await advance.refill(advance.put(row, due_at=None, wake_at=None))
            else:
                advance.put(row, due_at=None, wake_at=None)

    return act


async def events_loop(runner: Runner, changed: asyncio.Event, *, interval_s: float = 0.2) -> None:
    """Consume workflow result events: at once after a local change (``changed``: a task
    settled here), else every ``interval_s`` (events of tasks settled by other nodes)."""
    while True:
        changed.clear()
        try:
            handled = await runner.consume()
        except TransientError as exc:
            log.warning("workflow events pass skipped", code=exc.code, reason=exc.message)
            handled = 0
            await asyncio.sleep(1.0)
        if handled >= runner.batch:
            continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), interval_s)


async def waits_loop(
    runner: Runner, changed: asyncio.Event, clock: Clock, *, refresh_s: float = 1.0
) -> None:
    """Advance due waits; between passes wait for the earliest wake time, a local change, or
    ``refresh_s`` (waits set by other nodes)."""
    while True:
        changed.clear()
        try:
            handled = await runner.wake_due()
            if handled >= runner.batch:
                continue
            next_wake = await runner.next_wake()
        except TransientError as exc:
            log.warning("workflow waits pass skipped", code=exc.code, reason=exc.message)
            await asyncio.sleep(1.0)
            continue
        wait_s = refresh_s
        if next_wake is not None:  # never 0: a wait that cannot be handled must not spin
            wait_s = min(refresh_s, max(0.01, (next_wake - clock.now()).total_seconds()))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), wait_s)
