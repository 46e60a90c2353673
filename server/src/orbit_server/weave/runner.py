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
from enum import Enum

import structlog

from orbit_server.clock import Clock
from orbit_server.errors import QueueFull, TransientError
from orbit_server.pulse.events import EventConsumer
from orbit_server.pulse.loops import log_skipped
from orbit_server.pulse.model import ResultEvent
from orbit_server.pulse.service import TaskService
from orbit_server.store import Database, Tx
from orbit_server.store import steps as step_store
from orbit_server.weave.advance import Advance
from orbit_server.weave.service import WorkflowService
from orbit_server.weave.view import Due, Event, TaskEnded

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
        batch: int = 500,
        instances: int = 64,
        lanes: int = 1,
    ) -> None:
        self._db = db
        self._clock = clock
        self._tasks = tasks
        self._advancement = workflows.advancement
        self._events = EventConsumer(db, clock)
        self.batch = batch
        self.instances = instances
        self.lanes = lanes
        # Told, after each commit, the seconds from each handled result event's creation (its
        # step's task settling) to the advancement that handled it.
        self.observe_lag: Callable[[list[float]], object] | None = None

    # -- result events ------------------------------------------------------------------------

    async def consume(self) -> int:
        """One pass over pending workflow events, up to ``batch`` of them, handled in
        transactions of up to ``instances`` instances each; answers how many it handled."""

        async def read(tx: Tx) -> list[ResultEvent]:
            return await self._events.pending_owned(tx, OWNER, limit=self.batch)

        events = await self._db.read(read)
        by_instance: dict[str, list[ResultEvent]] = defaultdict(list)
        for event in events:
            if event.owner_id is not None:
                by_instance[event.owner_id].append(event)
        ids = sorted(by_instance)
        parts = [ids[at : at + self.instances] for at in range(0, len(ids), self.instances)]

        async def lane() -> int:
            done = 0
            while parts:
                done += await self._isolated(
                    parts.pop(0),
                    lambda p, m: self._consume(p, [e for i in p for e in by_instance[i]], m),
                )
            return done

        # Batches hold disjoint instances: ``lanes`` of them run at once (MySQL/MariaDB).
        return sum(await asyncio.gather(*(lane() for _ in range(self.lanes))))

    async def _isolated(
        self, workflow_ids: list[str], run: Callable[[list[str], Mode], Awaitable[int]]
    ) -> int:
        """Run a batch; when it fails for one instance's sake, run each instance alone so that
        the others go on: one whose new tasks meet a full queue goes on with them deferred
        (pending, tried again every second), one that cannot advance at all fails visibly.
        Transient errors (the database is down) propagate."""
        try:
            return await run(workflow_ids, Mode.BATCH)
        except QueueFull:
            pass
        except TransientError:  # the database is down: not an instance's fault
            raise
        except Exception:
            if len(workflow_ids) == 1:
                log.exception("workflow advancement failed", workflow_id=workflow_ids[0])
                return await self._fail(workflow_ids, run)
        if len(workflow_ids) > 1:
            return sum([await self._isolated([i], run) for i in workflow_ids])
        try:
            return await run(workflow_ids, Mode.DEFER)
        except TransientError:  # the database is down: not an instance's fault
            raise
        except Exception:
            log.exception("workflow advancement failed", workflow_id=workflow_ids[0])
        return await self._fail(workflow_ids, run)

    @staticmethod
    async def _fail(
        workflow_ids: list[str], run: Callable[[list[str], Mode], Awaitable[int]]
    ) -> int:
        """The last way out for one instance; should even that fail, it is logged and its
        work stays pending (other instances go on)."""
        try:
            return await run(workflow_ids, Mode.FAIL)
        except TransientError:
            raise
        except Exception:
            log.exception("a workflow that cannot advance could not be failed either",
                          workflow_id=workflow_ids[0])  # fmt: skip
            return 0

    async def _consume(self, workflow_ids: list[str], events: list[ResultEvent], mode: Mode) -> int:
        """Mark ``events`` processed and advance their instances, in one transaction."""

        fresh: list[ResultEvent] = []

        async def unit(tx: Tx) -> tuple[list[Advance], int]:
            marked = await self._events.mark_many_in(tx, events)
            fresh[:] = [e for e in events if e.id in marked]
            if mode is Mode.FAIL:
                failed = await self._advancement.fail_alone_in(
                    tx, workflow_ids[0], ADVANCEMENT_FAILED
                )
                return ([] if failed is None else [failed]), len(marked)
            tasks = {t.id: t for t in await self._tasks.read_many_in(
                tx, [e.task_id for e in fresh])}  # fmt: skip
            by_instance: dict[str, list[Event]] = defaultdict(list)
            for event in fresh:  # handled already (a duplicate, another node) are left out
                task = tasks.get(event.task_id)
                if event.owner_id is not None and task is not None:
                    by_instance[event.owner_id].append(TaskEnded(task, event.state))
            advances = await self._advancement.advance_in(
                tx, workflow_ids, by_instance, defer=mode is Mode.DEFER
            )
            return advances, len(marked)

        advances, handled = await self._db.run(unit)
        if self.observe_lag is not None and fresh:
            now = self._clock.now()
            self.observe_lag([(now - e.created_at).total_seconds() for e in fresh])
        await self._advancement.after(advances)
        return handled

    # -- waits --------------------------------------------------------------------------------

    async def wake_due(self) -> int:
        """One pass over due waits; answers how many it handled."""
        now = self._clock.now()

        async def read(tx: Tx) -> list[tuple[str, str]]:
            return await step_store.workflow_steps_due(tx, now, limit=self.batch)

        due = await self._db.read(read)
        by_instance: dict[str, list[str]] = defaultdict(list)
        for workflow_id, key in due:
            by_instance[workflow_id].append(key)
        ids = sorted(by_instance)

        def run(part: list[str], mode: Mode) -> Awaitable[int]:
            async def unit(tx: Tx) -> list[Advance]:
                if mode is Mode.FAIL:
                    failed = await self._advancement.fail_alone_in(tx, part[0], ADVANCEMENT_FAILED)
                    return [] if failed is None else [failed]
                events = {i: [Due(key) for key in by_instance[i]] for i in part}
                return await self._advancement.advance_in(
                    tx, part, events, defer=mode is Mode.DEFER
                )

            async def batch() -> int:
                await self._advancement.after(await self._db.run(unit))
                return sum(len(by_instance[i]) for i in part)

            return batch()

        for at in range(0, len(ids), self.instances):
            await self._isolated(ids[at : at + self.instances], run)
        return len(due)

    async def next_wake(self) -> datetime | None:
        async def read(tx: Tx) -> datetime | None:
            return await step_store.workflow_steps_next_wake(tx)

        return await self._db.read(read)


class Mode(Enum):
    BATCH = "batch"  # as usual
    DEFER = "defer"  # alone: new tasks that meet a full queue wait, pending
    FAIL = "fail"  # alone, after an error no retry mends: the instance fails visibly


ADVANCEMENT_FAILED = {
    "code": "advancement_failed",
    "message": "the workflow could not advance (an internal error; the server log has it)",
}


async def events_loop(runner: Runner, changed: asyncio.Event, *, interval_s: float = 0.2) -> None:
    """Consume workflow result events: at once after a local change (``changed``: a task
    settled here), else every ``interval_s`` (events of tasks settled by other nodes)."""
    while True:
        changed.clear()
        try:
            handled = await runner.consume()
        except TransientError as exc:
            log_skipped(log, "workflow events pass", exc)
            handled = 0
            await asyncio.sleep(1.0)
        except Exception:  # a bug must not stop every instance's advancement on this node
            log.exception("workflow events pass failed")
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
            log_skipped(log, "workflow waits pass", exc)
            await asyncio.sleep(1.0)
            continue
        except Exception:  # a bug must not stop every instance's waits on this node
            log.exception("workflow waits pass failed")
            await asyncio.sleep(1.0)
            continue
        wait_s = refresh_s
        if next_wake is not None:  # never 0: a wait that cannot be handled must not spin
            wait_s = min(refresh_s, max(0.01, (next_wake - clock.now()).total_seconds()))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), wait_s)
