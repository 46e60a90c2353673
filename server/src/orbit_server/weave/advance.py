"""Advancing instances (SPEC W3, decisions 0015 and 0020): read a view of each locked
instance, plan (pure), apply the plans set-wise, commit; then, in one place, tell Pulse and
the node what the commit made (:meth:`Advancement.after`).

Every use case that changes an instance goes through here: a start, a signal, an operator's
control (:class:`~orbit_server.weave.control.Control`), the result events and due waits of
the :class:`~orbit_server.weave.runner.Runner`. Many instances advance in one transaction:
their rows are read in one statement per round of reads, their writes made set-wise.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from orbit_server.audit import Actor, AuditWriter
from orbit_server.clock import Clock
from orbit_server.errors import NotFound
from orbit_server.pulse.service import TaskService
from orbit_server.scope import Scope
from orbit_server.store import Database, Tx
from orbit_server.store import steps as step_store
from orbit_server.store import workflows as workflow_store
from orbit_server.weave import engine
from orbit_server.weave.apply import Advance, apply, load
from orbit_server.weave.definition import Definition
from orbit_server.weave.definitions import Definitions
from orbit_server.weave.engine import (
    ACTIVE,
    FINISHED,
    Limits,
    Outcome,
    StepState,
    WorkflowState,
)
from orbit_server.weave.model import Workflow
from orbit_server.weave.plan import plan
from orbit_server.weave.port import PulsePort
from orbit_server.weave.view import (
    Active,
    Due,
    Event,
    Need,
    Plan,
    Rows,
    Start,
    TaskEnded,
    View,
)

__all__ = ["Advance", "Advancement"]  # Advance: the record of one, from apply

MAX_ROUNDS = 1000  # rounds of reads for one plan; each reads something new, so never reached


class Advancement:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        audit: AuditWriter,
        pulse: PulsePort,
        tasks: TaskService,
        definitions: Definitions,
        limits: Limits,
    ) -> None:
        self._db = db
        self._clock = clock
        self._audit = audit
        self._pulse = pulse
        self._tasks = tasks  # for what has to happen after a commit only
        self.definitions = definitions
        self.limits = limits
        self.changed = asyncio.Event()  # set when an instance's wait times may have changed
        # Told of each committed advancement (its writes, and the state it left): metrics.
        self.observe: Callable[[Sequence[Advance]], None] = lambda advances: None
        self.waiters: dict[str, set[asyncio.Event]] = {}  # by instance: its finish wakes them

    # -- in the caller's transaction ----------------------------------------------------------

    async def advance_in(
        self,
        tx: Tx,
        workflow_ids: Sequence[str],
        events: Mapping[str, Sequence[Event]],
        *,
        defer: bool = False,
    ) -> list[Advance]:
        """Lock the instances in id order, plan their ``events`` and write the plans.
        ``defer``: new tasks that do not fit their queue wait, pending (an instance alone
        after a full queue). Instances that are gone are passed over. The unit's time is read
        before the locks: what it writes is stamped as of then, as the tasks it creates."""
        now = self._clock.now()
        instances = await workflow_store.workflows_lock_many(tx, workflow_ids)
        views: list[View] = []
        definitions: list[Definition] = []
        for workflow in instances:
            definition = await self.definitions.load(
                tx, workflow.scope, workflow.definition, workflow.version
            )
            view = View(workflow)
            if defer:
                queues = sorted(definition.queues)
                view.room = await self._pulse.room(tx, workflow.scope, queues)
            views.append(view)
            definitions.append(definition)
        await _preload(tx, definitions, views, events)
        plans = await self._plans(tx, definitions, views, events, now)
        return await apply(tx, self._pulse, plans)

    async def start_in(
        self, tx: Tx, workflow: Workflow, definition: Definition, input_: Any
    ) -> Advance:
        """A new instance (inserted with the plan) begun at its first step."""
        view = View(workflow, new_instance=True)
        plans = await self._plans(
            tx, [definition], [view], {workflow.id: [Start(input_)]}, self._clock.now()
        )
        [advance] = await apply(tx, self._pulse, plans)
        return advance

    async def _plans(
        self,
        tx: Tx,
        definitions: Sequence[Definition],
        views: Sequence[View],
        events: Mapping[str, Sequence[Event]],
        now: datetime,
    ) -> list[Plan]:
        """Plan every instance as of ``now``; read what plans lack, for all at once, and plan
        those again."""
        done: list[Plan | None] = [None] * len(views)
        todo = list(range(len(views)))
        for _ in range(MAX_ROUNDS):
            wanted: list[tuple[View, list[Need]]] = []
            for i in todo:
                made = plan(definitions[i], views[i], events.get(views[i].workflow.id, ()),
                            now, self.limits)  # fmt: skip
                if made.needs:
                    wanted.append((views[i], made.needs))
                else:
                    done[i] = made
            if not wanted:
                break
            await load(tx, wanted)
            todo = [i for i in todo if done[i] is None]
        else:
            raise RuntimeError("a plan kept needing reads")
        return [p for p in done if p is not None]

    # -- one instance, one transaction --------------------------------------------------------

    async def run_one(
        self,
        scope: Scope | None,
        workflow_id: str,
        events: Sequence[Event],
        *,
        actor: Actor | None = None,
        action: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> Advance:
        """Lock an instance, plan ``events``, write, audit (when ``action`` is given: if the
        plan changed the instance or asks for it) and commit; then :meth:`after`."""

        async def unit(tx: Tx) -> Advance:
            return await self.run_in(
                tx, scope, workflow_id, events, actor=actor, action=action, details=details
            )

        advance = await self._db.run(unit)
        await self.after([advance])
        return advance

    async def run_in(
        self,
        tx: Tx,
        scope: Scope | None,
        workflow_id: str,
        events: Sequence[Event],
        *,
        actor: Actor | None = None,
        action: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> Advance:
        """:meth:`run_one` in the caller's transaction (a bulk operation's step), which calls
        :meth:`after` once it commits. A refusal of the planner (``StateConflict``) comes
        before anything is written."""
        now = self._clock.now()
        workflow = await workflow_store.workflow_lock(tx, workflow_id)
        if workflow is None or (scope is not None and workflow.scope != scope):
            raise NotFound("no such workflow")
        definition = await self.definitions.load(
            tx, workflow.scope, workflow.definition, workflow.version
        )
        view = View(workflow)
        plans = await self._plans(tx, [definition], [view], {workflow_id: events}, now)
        [advance] = await apply(tx, self._pulse, plans, actor=actor)
        if actor is not None and action is not None and (advance.changed or advance.audit):
            await self._audit.record(
                tx, scope=workflow.scope, actor=actor, action=action,
                target_kind="workflow", target_id=workflow.id, details=details,
            )  # fmt: skip
        return advance

    async def fail_alone_in(
        self, tx: Tx, workflow_id: str, error: dict[str, Any]
    ) -> Advance | None:
        """End an instance ``failed`` without its definition (the way out for one that cannot
        advance): its running step tasks are cancelled, its active executions too. None: it
        is gone or finished."""
        found = await workflow_store.workflows_lock_many(tx, [workflow_id])
        if not found or found[0].state in FINISHED:
            return None
        workflow = found[0]
        now = self._clock.now()
        advance = Advance(wf=workflow, was_finished=False, changed=True)
        rows = await step_store.workflow_steps_in_states(tx, [workflow_id], list(ACTIVE))
        for row in rows:
            if row.task_id is not None and row.state == StepState.RUNNING:
                with contextlib.suppress(NotFound):
                    await self._pulse.cancel(tx, workflow.scope, row.task_id, "the workflow failed")
        await step_store.workflow_steps_update_many(tx, [
            replace(r, state=StepState.CANCELLED, ended_at=now, due_at=None,
                    wake_at=None, followed=True, updated_at=now)
            for r in rows
        ])  # fmt: skip
        advance.wf = replace(workflow, state=WorkflowState.FAILED, error=error,
                             finished_at=now, updated_at=now)  # fmt: skip
        await workflow_store.workflows_update_many(tx, [advance.wf])
        return advance

    # -- after the commit ---------------------------------------------------------------------

    async def after(self, advances: Sequence[Advance]) -> None:
        """After the commit of ``advances``: report them and wake the instances' waiters
        (Pulse's own wake-ups come from the events its part of the transaction recorded)."""
        self.observe(advances)
        for advance in advances:
            if advance.wf.state in FINISHED:
                for event in self.waiters.get(advance.wf.id, ()):
                    event.set()
        self.changed.set()


async def _preload(
    tx: Tx,
    definitions: Sequence[Definition],
    views: Sequence[View],
    events: Mapping[str, Sequence[Event]],
) -> None:
    """The rows the events name (their tasks' steps, the due waits) and their containers, in
    one statement each: what nearly every plan reads first. Then, in one more statement, the
    active executions of the instances that a step's end may finish (a finish cancels what
    is still active), so that their plans are made once, not again after that read."""
    wanted = []
    for view in views:
        keys: list[str] = []
        for event in events.get(view.workflow.id, ()):
            if isinstance(event, TaskEnded) and event.task.owner_step is not None:
                keys.append(event.task.owner_step)
            elif isinstance(event, Due):
                keys.append(event.key)
        if keys:
            wanted.append((view, [Rows(tuple(dict.fromkeys(keys)))]))
    if not wanted:
        return
    await load(tx, wanted)
    parents = []
    for view in views:
        above = {r.parent_key for r in view.rows.values() if r is not None and r.parent_key}
        missing = tuple(sorted(k for k in above if k not in view.rows))
        if missing:
            parents.append((view, [Rows(missing)]))
    if parents:
        await load(tx, parents)
    finishing = [
        (view, [Active()])
        for view, definition in zip(views, definitions, strict=True)
        if _may_finish(definition, view, events.get(view.workflow.id, ()))
    ]
    if finishing:
        await load(tx, finishing)


def _may_finish(definition: Definition, view: View, events: Sequence[Event]) -> bool:
    """Whether a task's end among ``events`` leaves the instance's own step list: a top-level
    step with nowhere to go next."""
    for event in events:
        if not isinstance(event, TaskEnded) or event.task.owner_step is None:
            continue
        row = view.rows.get(event.task.owner_step)
        step = None if row is None else definition.steps.get(row.step)
        if row is None or step is None or row.parent_key is not None:
            continue
        outcome = Outcome.SUCCEEDED if event.state == "succeeded" else Outcome.FAILED
        if not isinstance(engine.transition(step, outcome, None), engine.Goto):
            return True
    return False
