"""One advancement of one instance, inside the caller's transaction (SPEC W3, decision 0015).

An :class:`Advance` is made with the instance's row already locked. Its methods record what
happened to a step execution and follow the definition from there: enter the next steps, ask
Pulse for their tasks, wait, join branches, fan out and in, end the instance. Writes are
gathered and made by :meth:`Advance.flush`: new step rows in one statement, changed ones by
key, the new tasks through ``TaskService.create_in`` (one batch), the instance last.

Work cap (W9): one advancement enters at most ``WORK_CAP`` steps without a task; past that
the step is written ``pending`` and due now, and the wait loop continues in a new
transaction. A map starts at most ``max_concurrency`` items per advancement (≤ 1,000).
An instance makes at most ``max_step_executions`` step executions in all (items and rounds
included); the one that would pass it fails the instance, ``step_limit_exceeded``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from orbit_server.audit import Actor
from orbit_server.errors import StateConflict
from orbit_server.pulse.model import Owner
from orbit_server.pulse.service import TaskService
from orbit_server.scope import Scope
from orbit_server.store import Tx
from orbit_server.store import weave as store
from orbit_server.store.base import chunks
from orbit_server.store.pulse import TaskRecord
from orbit_server.store.weave import StepRecord, WorkflowRecord
from orbit_server.weave import engine
from orbit_server.weave.definition import (
    ChoiceStep,
    Definition,
    FailStep,
    MapStep,
    ParallelStep,
    PollStep,
    SignalStep,
    Step,
    SucceedStep,
    TaskFields,
    TaskStep,
    TimerStep,
)
from orbit_server.weave.engine import (
    ACTIVE,
    FINISHED,
    Failure,
    Goto,
    ListEnd,
    Outcome,
    StepState,
    WorkflowState,
)
from orbit_server.weave.expr import ExpressionFailed

WORK_CAP = 100
MAP_BATCH = 100  # a map's items started (and rows created) by one advancement, at most
DEFER = timedelta(seconds=1)  # a step task that met a full queue is tried again after this
MAX_MAP_ITEMS = 100_000
SYSTEM = Actor(name="orbit:weave")


def _failed(code: str, message: str, **more: Any) -> dict[str, Any]:
    return {"code": code, "message": message, **more}


def _broken(exc: ExpressionFailed, **more: Any) -> dict[str, Any]:
    """The error of a step whose expression failed, or whose task Pulse would refuse."""
    return _failed(getattr(exc, "code", "expression_failed"), str(exc), **more)


class Advance:
    def __init__(
        self,
        tx: Tx,
        tasks: TaskService,
        definition: Definition,
        workflow: WorkflowRecord,
        now: datetime,
        *,
        max_params_bytes: int = 1 << 20,
        max_step_executions: int = 200_000,
    ) -> None:
        self.tx = tx
        self.max_step_executions = max_step_executions
        self._tasks = tasks
        self.definition = definition
        self.wf = workflow
        self.now = now
        self.context: dict[str, Any] = {
            "steps": dict(workflow.context.get("steps", {})),
            "visits": dict(workflow.context.get("visits", {})),
            "seq": int(workflow.context.get("seq", 0)),
        }
        self.rows: dict[str, StepRecord] = {}
        self._new: list[str] = []
        self._dirty: set[str] = set()
        self._items: dict[str, Any] = {}
        self._new_tasks: list[TaskRecord] = []
        self._entered = 0
        self.changed = False
        self.writes = 0  # rows written: step executions created or changed, tasks created
        self.review_changed = False  # a step entered or left needs_review
        self.audit = False  # audit an operator's call that changed no row of its own
        self.new_instance = False  # its row is inserted by the flush (a start)
        self.was_finished = workflow.state in FINISHED  # as it was locked
        self.max_params_bytes = max_params_bytes
        # Set when the instance's new tasks met a full queue: those that do not fit in
        # ``room`` (free places by queue) wait, pending, instead.
        self.defer_tasks = False
        self.room: dict[str, int] = {}

    # -- reading and writing rows -------------------------------------------------------------

    @property
    def paused(self) -> bool:
        return self.wf.state == WorkflowState.PAUSED

    @property
    def finished(self) -> bool:
        return self.wf.state in FINISHED

    async def row(self, key: str) -> StepRecord | None:
        found = self.rows.get(key)
        if found is None:
            found = await store.workflow_step_get(self.tx, self.wf.id, key)
            if found is not None:
                self.rows[key] = found
        return found

    def put(self, row: StepRecord, **changes: Any) -> StepRecord:
        if "state" in changes:  # plain strings: expressions see them
            changes["state"] = str(changes["state"])
            if StepState.NEEDS_REVIEW in (row.state, changes["state"]):
                self.review_changed = True
        row = dataclasses.replace(row, updated_at=self.now, **changes)
        self.rows[row.key] = row
        if row.key not in self._new:
            self._dirty.add(row.key)
        self.changed = True
        return row

    def _create(
        self,
        key: str,
        step: str,
        kind: str,
        *,
        parent_key: str | None,
        branch: str | None,
        input_: Any,
        item: int | None = None,
        round_: int | None = None,
    ) -> StepRecord:
        self.context["seq"] += 1
        row = StepRecord(
            workflow_id=self.wf.id, key=key, seq=self.context["seq"], step=step, kind=kind,
            state=StepState.PENDING, parent_key=parent_key, branch=branch, item=item,
            round=round_, task_id=None, tries=0, input=input_, output=None, error=None,
            progress=None, followed=False, due_at=None, wake_at=None, started_at=self.now,
            ended_at=None, updated_at=self.now,
        )  # fmt: skip
        self.rows[key] = row
        self._new.append(key)
        self.changed = True
        return row

    def data(self, **extra: Any) -> dict[str, Any]:
        """The variables an expression sees."""
        return {"input": self.wf.input, "steps": self.context["steps"], **extra}

    async def _write_rows(self) -> None:
        await _write_rows(self.tx, [self])

    async def flush(self) -> None:
        """Write what this advancement changed (the caller commits)."""
        await flush_all(self.tx, self._tasks, [self])

    # -- entering steps -----------------------------------------------------------------------

    async def enter(
        self, step_id: str, *, parent_key: str | None, branch: str | None, prev: Any
    ) -> None:
        """A new execution of ``step_id``, begun now or (past the work cap) due now."""
        if await self.over_limit(1):
            return
        step = self.definition.steps[step_id]
        visit = int(self.context["visits"].get(step_id, 0)) + 1
        self.context["visits"][step_id] = visit
        row = self._create(
            engine.step_key(step_id, visit), step_id, _kind(step),
            parent_key=parent_key, branch=branch, input_=prev,
        )  # fmt: skip
        if self._entered >= WORK_CAP and not isinstance(step, TaskStep):
            self.put(row, due_at=self.now, wake_at=self.now)
            return
        await self.begin(row)

    async def over_limit(self, more: int) -> bool:
        """Whether ``more`` step executions would take the instance past its limit; if so it
        ends ``failed`` (``step_limit_exceeded``) instead."""
        made = int(self.context["seq"])
        if made + more <= self.max_step_executions:
            return False
        message = (
            f"the workflow made {made} step executions and needs {more} more; an instance may "
            f"make at most {self.max_step_executions} (ORBIT_WORKFLOW_MAX_STEP_EXECUTIONS)"
        )
        await self.finish(WorkflowState.FAILED, error=_failed("step_limit_exceeded", message))
        return True

    async def begin(self, row: StepRecord) -> None:
        """Start a pending execution according to its step's kind."""
        step = self.definition.steps[row.step]
        row = self.put(row, due_at=None, wake_at=None)
        if not isinstance(step, TaskStep):
            self._entered += 1
        try:
            await self._begin(row, step)
        except ExpressionFailed as exc:
            await self.complete(row, Outcome.FAILED, error=_broken(exc, step=row.key))

    async def _begin(self, row: StepRecord, step: Step) -> None:
        if isinstance(step, TaskStep):
            self._start_task(row)
        elif isinstance(step, ChoiceStep):
            target = engine.choose(step, self.definition, self.data())
            if target is None:
                error = _failed("no_choice", f"no choice of {step.id} held", step=row.key)
                await self.complete(row, Outcome.FAILED, error=error)
                return
            row = self.put(row, state=StepState.SUCCEEDED, output=row.input, ended_at=self.now,
                           followed=True)  # fmt: skip
            self.record(row)
            await self.enter(target, parent_key=row.parent_key, branch=row.branch, prev=row.input)
        elif isinstance(step, ParallelStep):
            row = self.put(row, state=StepState.RUNNING, progress={"done": {}})
            for branch in step.branches:
                first = self.definition.starts[(step.id, branch.name)]
                await self.enter(first, parent_key=row.key, branch=branch.name, prev=row.input)
                if self.rows[row.key].state != StepState.RUNNING or self.finished:
                    break  # a branch failed as it began: the others do not start
        elif isinstance(step, MapStep):
            await self._begin_map(row, step)
        elif isinstance(step, TimerStep):
            due = engine.timer_due(step, self.definition, self.data(), self.now)
            self.put(row, state=StepState.WAITING, due_at=due, wake_at=due)
        elif isinstance(step, SignalStep):
            await self._begin_signal(row, step)
        elif isinstance(step, PollStep):
            row = self.put(row, state=StepState.RUNNING, progress={"round": 0})
            self._start_round(row, step)
        elif isinstance(step, SucceedStep):
            expression = self.definition.expr(step.id, "output")
            output = row.input if expression is None else expression.evaluate(self.data())
            await self.complete(row, Outcome.SUCCEEDED, output=output)
        elif isinstance(step, FailStep):
            error = _failed(step.error.code, step.error.message, step=row.key)
            await self.complete(row, Outcome.FAILED, error=error)

    async def start_pending(self, row: StepRecord) -> None:
        """Begin a pending execution that waited (past the work cap, or for room in a full
        queue): a step, a map's item or a poll's round."""
        if row.item is None and row.round is None:
            await self.begin(row)
            return
        try:
            self._start_task(row)
        except ExpressionFailed as exc:
            await self.complete(row, Outcome.FAILED, error=_broken(exc, step=row.key))

    def _task_of(self, row: StepRecord) -> tuple[TaskFields, dict[str, Any]]:
        """What an execution's task is made of (its step's, a map's or a poll's task fields)
        and the variables its expressions see."""
        step = self.definition.steps[row.step]
        if row.item is not None:
            assert isinstance(step, MapStep)
            return step.task, self.data(item=row.input, index=row.item)
        if row.round is not None:
            assert isinstance(step, PollStep)
            return step.task, self.data(round=row.round)
        assert isinstance(step, TaskStep)
        return step, self.data()

    def _start_task(self, row: StepRecord) -> None:
        """A task for the execution, created with the flush (or, its queue full, a wait)."""
        fields, data = self._task_of(row)
        spec = engine.task_spec(
            self.definition, row.step, fields, data,
            owner=Owner("workflow", self.wf.id, row.key), gate_id=self.wf.gate_id,
            max_params_bytes=self.max_params_bytes,
        )  # fmt: skip
        if self.defer_tasks and self.room.get(spec.queue, 1) <= 0:
            # Its queue is full: the execution waits, and the wait loop tries again.
            due = self.now + DEFER
            self.put(row, state=StepState.PENDING, due_at=due, wake_at=due)
            return
        if spec.queue in self.room:
            self.room[spec.queue] -= 1
        task = self._tasks.build(self.wf.scope, [spec], self.now)[0]
        self._new_tasks.append(task)
        self.put(row, state=StepState.RUNNING, task_id=task.id, tries=row.tries + 1, due_at=None,
                 wake_at=None)  # fmt: skip

    async def _begin_signal(self, row: StepRecord, step: SignalStep) -> None:
        signal = await store.workflow_signal_oldest_pending(self.tx, self.wf.id, step.name)
        if signal is not None:
            await store.workflow_signal_deliver(self.tx, signal.id, row.key, self.now)
            await self.deliver(row, signal.payload)
            return
        due = None
        if step.timeout_ms is not None:
            due = self.now + timedelta(milliseconds=step.timeout_ms)
        self.put(row, state=StepState.WAITING, due_at=due, wake_at=due)

    async def deliver(self, row: StepRecord, payload: Any) -> None:
        """A signal reaches the execution waiting for it."""
        step = self.definition.steps[row.step]
        expression = self.definition.expr(step.id, "output")
        try:
            output = (
                payload if expression is None else expression.evaluate(self.data(signal=payload))
            )
        except ExpressionFailed as exc:
            error = _broken(exc, step=row.key)
            await self.complete(row, Outcome.FAILED, error=error)
            return
        await self.complete(row, Outcome.SUCCEEDED, output=output)

    # -- map ----------------------------------------------------------------------------------

    async def _begin_map(self, row: StepRecord, step: MapStep) -> None:
        expression = self.definition.expr(step.id, "items")
        assert expression is not None
        items = expression.evaluate(self.data())
        if not isinstance(items, list):
            raise ExpressionFailed("a map's items must give a list")
        if len(items) > MAX_MAP_ITEMS:
            raise ExpressionFailed(f"a map has at most {MAX_MAP_ITEMS} items, not {len(items)}")
        if not items:
            await self.complete(row, Outcome.SUCCEEDED, output=[])
            return
        if await self.over_limit(len(items)):
            return
        self._items[row.key] = items
        if row.key not in self._new:  # begun after a wait: its row exists, without items
            await store.workflow_step_set_items(self.tx, self.wf.id, row.key, items)
        progress = {"total": len(items), "created": 0, "started": 0, "done": 0}
        row = self.put(row, state=StepState.RUNNING, progress=progress)
        await self.refill(row)

    async def refill(self, row: StepRecord) -> None:
        """Start items until ``max_concurrency`` run, at most ``MAP_BATCH`` in this
        advancement (their rows created ``MAP_BATCH`` at a time); past that the map's row is
        due now and the wait loop goes on in a new transaction."""
        step = self.definition.steps[row.step]
        assert isinstance(step, MapStep) and row.progress is not None
        progress = dict(row.progress)
        items: list[Any] | None = self._items.get(row.key)

        def room() -> bool:
            started, done = int(progress["started"]), int(progress["done"])
            return started < int(progress["total"]) and started - done < step.max_concurrency

        budget = MAP_BATCH
        while room() and budget > 0:
            budget -= 1
            index = progress["started"]
            if index == progress["created"]:
                if items is None:
                    items = await store.workflow_step_items(self.tx, self.wf.id, row.key)
                end = min(progress["total"], index + MAP_BATCH)
                for i in range(index, end):
                    self._create(
                        engine.item_key(row.key, i), step.id, "task", parent_key=row.key,
                        branch=None, input_=items[i], item=i,
                    )  # fmt: skip
                progress["created"] = end
            child = await self.row(engine.item_key(row.key, index))
            assert child is not None
            progress["started"] = index + 1
            try:
                self._start_task(child)
            except ExpressionFailed as exc:
                error = _broken(exc, step=child.key)
                self.put(child, state=StepState.FAILED, error=error, ended_at=self.now,
                         followed=True)  # fmt: skip
                row = self.put(row, progress=progress)
                await self._fail_container(row, error)
                return
        due = self.now if room() else None
        self.put(row, progress=progress, due_at=due, wake_at=due)

    async def _item_ended(self, parent: StepRecord, child: StepRecord, outcome: Outcome) -> None:
        assert parent.progress is not None
        if outcome is not Outcome.SUCCEEDED:
            error = dict(child.error or {})
            error.setdefault("code", "item_failed")
            error["step"] = child.key
            await self._fail_container(parent, error)
            return
        progress = dict(parent.progress)
        progress["done"] += 1
        parent = self.put(parent, progress=progress)
        if progress["done"] == progress["total"]:
            outputs = await self._item_outputs(parent)
            await self.complete(parent, Outcome.SUCCEEDED, output=outputs)
        else:
            await self.refill(parent)

    async def _item_outputs(self, parent: StepRecord) -> list[Any]:
        await self._write_rows()  # this advancement's items too
        return await store.workflow_step_outputs(self.tx, self.wf.id, parent.key)

    # -- poll ---------------------------------------------------------------------------------

    def _start_round(self, row: StepRecord, step: PollStep) -> None:
        assert row.progress is not None
        number = int(row.progress["round"]) + 1
        row = self.put(row, state=StepState.RUNNING, progress={**row.progress, "round": number},
                       due_at=None, wake_at=None)  # fmt: skip
        child = self._create(
            engine.round_key(row.key, number), step.id, "task", parent_key=row.key,
            branch=None, input_=row.input, round_=number,
        )  # fmt: skip
        self._start_task(child)

    async def next_round(self, row: StepRecord) -> None:
        step = self.definition.steps[row.step]
        assert isinstance(step, PollStep)
        if await self.over_limit(1):
            return
        try:
            self._start_round(row, step)
        except ExpressionFailed as exc:
            error = _broken(exc, step=row.key)
            await self.complete(row, Outcome.FAILED, error=error)

    async def _round_ended(self, parent: StepRecord, child: StepRecord, outcome: Outcome) -> None:
        step = self.definition.steps[parent.step]
        assert isinstance(step, PollStep) and child.round is not None
        if outcome is not Outcome.SUCCEEDED:
            await self.complete(parent, Outcome.FAILED, error={**(child.error or {}),
                                                               "step": child.key})  # fmt: skip
            return
        until = self.definition.expr(step.id, "until")
        assert until is not None
        try:
            met = until.test(self.data(result=child.output, round=child.round))
        except ExpressionFailed as exc:
            error = _broken(exc, step=parent.key)
            await self.complete(parent, Outcome.FAILED, error=error)
            return
        decision = engine.after_round(
            step, round_=child.round, met=met, started_at=parent.started_at, now=self.now
        )
        if decision.done:
            await self.complete(parent, Outcome.SUCCEEDED, output=child.output)
        elif decision.exhausted:
            error = _failed(
                "poll_exhausted", f"{step.id} stopped after {child.round} rounds", step=parent.key
            )
            await self.complete(parent, Outcome.EXHAUSTED, output=child.output, error=error)
        else:
            self.put(parent, state=StepState.WAITING, output=child.output, due_at=decision.at,
                     wake_at=decision.at)  # fmt: skip

    # -- outcomes -----------------------------------------------------------------------------

    async def task_ended(self, row: StepRecord, task: TaskRecord) -> None:
        """The result event of a step's task: record it and follow."""
        if task.state == "needs_review":
            self.put(row, state=StepState.NEEDS_REVIEW)
            return
        if task.state == "succeeded":
            _, data = self._task_of(row)
            try:
                output = engine.mapped_output(self.definition, row.step, task.result, data)
            except ExpressionFailed as exc:
                error = _broken(exc, step=row.key)
                await self.complete(row, Outcome.FAILED, error=error)
                return
            await self.complete(row, Outcome.SUCCEEDED, output=output)
            return
        error = dict(task.error or {})
        error.setdefault("code", "cancelled" if task.state == "cancelled" else "task_failed")
        error.setdefault("message", f"the step's task ended {task.state}")
        error["step"] = row.key
        error["task_id"] = task.id
        await self.complete(row, Outcome.FAILED, error=error)

    async def complete(
        self,
        row: StepRecord,
        outcome: Outcome,
        *,
        output: Any = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        """Record how an execution ended and, unless the instance is paused, follow it."""
        state = StepState.SUCCEEDED if outcome is Outcome.SUCCEEDED else StepState.FAILED
        row = self.put(row, state=state, output=output, error=error, ended_at=self.now,
                       due_at=None, wake_at=None, followed=False)  # fmt: skip
        self.record(row)
        if not self.paused:
            await self.follow(row)

    def record(self, row: StepRecord) -> None:
        """Make a step's latest execution visible to expressions as ``steps.<id>``."""
        if row.item is None and row.round is None:
            self.context["steps"][row.step] = {
                "output": row.output,
                "error": row.error,
                "state": str(row.state),
            }

    async def follow(self, row: StepRecord) -> None:
        """Go on from an ended execution (once: ``followed`` marks it)."""
        if self.finished:
            return
        row = self.put(row, followed=True)
        step = self.definition.steps[row.step]
        outcome = _outcome_of(row, step)
        if row.parent_key is not None:
            parent = await self.row(row.parent_key)
            if parent is None or parent.state not in (StepState.RUNNING, StepState.WAITING):
                return  # the container ended meanwhile (failed, skipped, cancelled)
        if row.parent_key is not None and (row.item is not None or row.round is not None):
            assert parent is not None
            if row.item is not None:
                await self._item_ended(parent, row, outcome)
            else:
                await self._round_ended(parent, row, outcome)
            return
        decided = engine.transition(step, outcome, row.error)
        if isinstance(decided, Goto):
            await self.enter(
                decided.step, parent_key=row.parent_key, branch=row.branch, prev=row.output
            )
        elif isinstance(decided, ListEnd) or isinstance(step, SucceedStep):
            own = isinstance(step, SucceedStep) and step.output is not None
            await self._list_ended(row.parent_key, row.branch, row.output, own=own)
        elif isinstance(decided, Failure):
            error = decided.error
            if row.parent_key is None and error.get("step") != row.key:
                # The instance's error names its top-level step (which retry or skip take),
                # and the execution inside it that failed first.
                error = {**error, "step": row.key, "cause": error.get("step")}
            await self._fail_list(row.parent_key, error)

    async def _list_ended(
        self, parent_key: str | None, branch: str | None, output: Any, *, own: bool = False
    ) -> None:
        """A step list ran out, or a ``succeed`` step ended it (``own``: with its own output,
        which the definition's ``output`` does not replace)."""
        if parent_key is None:
            expression = None if own else self.definition.expr("", "output")
            try:
                final = output if expression is None else expression.evaluate(self.data())
            except ExpressionFailed as exc:
                await self.finish(WorkflowState.FAILED, error=_broken(exc))
                return
            await self.finish(WorkflowState.SUCCEEDED, output=final)
            return
        parent = await self.row(parent_key)
        if parent is None or parent.state != StepState.RUNNING or parent.progress is None:
            return
        step = self.definition.steps[parent.step]
        assert isinstance(step, ParallelStep) and branch is not None
        done = {**parent.progress.get("done", {}), branch: output}
        parent = self.put(parent, progress={**parent.progress, "done": done})
        if len(done) == len(step.branches):
            await self.complete(
                parent, Outcome.SUCCEEDED, output={b.name: done[b.name] for b in step.branches}
            )

    async def _fail_list(self, parent_key: str | None, error: dict[str, Any]) -> None:
        if parent_key is None:
            await self.finish(WorkflowState.FAILED, error=error)
            return
        parent = await self.row(parent_key)
        if parent is None or parent.state not in (StepState.RUNNING, StepState.WAITING):
            return
        await self._fail_container(parent, error)

    async def _fail_container(self, parent: StepRecord, error: dict[str, Any]) -> None:
        """A branch or an item failed: stop the container's other work, then the container
        fails (and follows its own failure transition)."""
        await self.cancel_active(under=parent.key, reason="a sibling failed")
        await self.complete(parent, Outcome.FAILED, error=error)

    # -- the instance -------------------------------------------------------------------------

    async def finish(
        self, state: WorkflowState, *, output: Any = None, error: dict[str, Any] | None = None
    ) -> None:
        if self.finished:
            return
        await self.cancel_active(under=None, reason=f"the workflow {state}")
        self.wf = dataclasses.replace(
            self.wf, state=str(state), output=output, error=error, finished_at=self.now
        )
        self.changed = True

    async def cancel_active(self, *, under: str | None, reason: str) -> None:
        """Cancel active executions (all, or those under one container) and their tasks."""
        stored = await store.workflow_steps_in_states(self.tx, self.wf.id, list(ACTIVE))
        for found in stored:
            self.rows.setdefault(found.key, found)
        active = [r for r in self.rows.values() if r.state in ACTIVE]
        if under is not None:
            active = [r for r in active if self._descends(r, under)]
        for seen in sorted(active, key=lambda r: r.seq):
            await self.cancel_task(seen, reason=reason)
            current = self.rows[seen.key]  # as cancel_task left it
            self.put(current, state=StepState.CANCELLED, ended_at=self.now, due_at=None,
                     wake_at=None, followed=True)  # fmt: skip

    async def cancel_task(self, row: StepRecord, *, reason: str) -> None:
        """Cancel the running execution's task through Pulse (a started one is asked to stop)."""
        if row.task_id is None or row.state != StepState.RUNNING:
            return
        unborn = [t for t in self._new_tasks if t.id == row.task_id]
        if unborn:  # made by this advancement and not written yet: it never exists
            self._new_tasks.remove(unborn[0])
            self.put(row, task_id=None)
            return
        with contextlib.suppress(StateConflict):  # it ended meanwhile: its result event
            await self._tasks.cancel_in(  # finds the execution ended
                self.tx, self.wf.scope, row.task_id, reason=reason, actor=SYSTEM, audit=False
            )

    def _descends(self, row: StepRecord, ancestor: str) -> bool:
        parent = row.parent_key
        seen = 0
        while parent is not None and seen < 64:
            if parent == ancestor:
                return True
            above = self.rows.get(parent)
            parent = None if above is None else above.parent_key
            seen += 1
        return False

    def new_task_for(self, row: StepRecord) -> None:
        """A fresh task for a task step's execution (an operator's retry)."""
        self._start_task(row)


async def _write_rows(tx: Tx, advances: Sequence[Advance]) -> None:
    """New step executions of all ``advances`` in one statement, changed ones by key."""
    new: list[StepRecord] = []
    items: dict[tuple[str, str], Any] = {}  # by instance too: keys repeat across instances
    for advance in advances:
        advance.writes += len(advance._new) + len(advance._dirty)
        new += [advance.rows[k] for k in advance._new]
        items.update({(advance.wf.id, k): v for k, v in advance._items.items()})
    for part in chunks(new, 500):
        await store.workflow_steps_insert(tx, part, items)
    changed = [a.rows[k] for a in advances for k in sorted(a._dirty)]
    for part in chunks(changed, 500):
        await store.workflow_steps_update_many(tx, part)
    for advance in advances:
        advance._new, advance._dirty = [], set()


async def flush_all(tx: Tx, tasks: TaskService, advances: Sequence[Advance]) -> None:
    """Write what the advancements changed, batched across them: their step executions, their
    new tasks (one ``create_in`` per scope), each instance last. The caller commits."""
    await _write_rows(tx, advances)
    by_scope: dict[Scope, list[Advance]] = {}
    for advance in advances:
        if advance._new_tasks:
            by_scope.setdefault(advance.wf.scope, []).append(advance)
    for scope, group in by_scope.items():
        new_tasks = [t for a in group for t in a._new_tasks]
        await tasks.create_in(tx, scope, new_tasks, group[0].now)
        for advance in group:
            advance.writes += len(advance._new_tasks)
            advance._new_tasks = []
    changed = [a for a in advances if a.changed or a.new_instance]
    for advance in changed:
        state = advance.wf.state
        reviewable = state in (WorkflowState.RUNNING, WorkflowState.NEEDS_REVIEW)
        if reviewable and (advance.review_changed or state == WorkflowState.NEEDS_REVIEW):
            reviewing = await store.workflow_steps_count_in_state(
                tx, advance.wf.id, StepState.NEEDS_REVIEW
            )
            state = WorkflowState.NEEDS_REVIEW if reviewing else WorkflowState.RUNNING
        advance.wf = dataclasses.replace(
            advance.wf, state=str(state), context=advance.context, updated_at=advance.now
        )
    for advance in changed:
        if advance.new_instance:  # last: a duplicate idempotency key rolls it all back
            await store.workflow_insert(tx, advance.wf)
    existing = [a for a in changed if not a.new_instance]
    for part in chunks(existing, 500):
        await store.workflows_update_many(tx, [a.wf for a in part])


def _kind(step: Step) -> str:
    tag = type(step).__struct_config__.tag
    return str(tag)


def _outcome_of(row: StepRecord, step: Step) -> Outcome:
    """How an ended execution ended: a timeout and an exhaustion are their own step's (a
    signal's, a poll's) and only when its own error says so — a task's error code proves
    nothing."""
    if row.state in (StepState.SUCCEEDED, StepState.SKIPPED):
        return Outcome.SUCCEEDED
    error = row.error or {}
    own = error.get("step") == row.key and row.item is None and row.round is None
    if own and isinstance(step, SignalStep) and error.get("code") == "signal_timeout":
        return Outcome.TIMED_OUT
    if own and isinstance(step, PollStep) and error.get("code") == "poll_exhausted":
        return Outcome.EXHAUSTED
    return Outcome.FAILED
