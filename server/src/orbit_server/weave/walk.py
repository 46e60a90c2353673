"""The walk of one plan (decision 0020): record what happened to a step execution and follow
the definition from there — enter the next steps, ask for their tasks, wait, join branches,
end the instance. Pure: it reads only its :class:`~orbit_server.weave.view.View` (raising
:class:`~orbit_server.weave.view.Missing` for what the view lacks) and writes only its
:class:`~orbit_server.weave.view.Plan`. What each kind of step does when it begins and
when its children end is :class:`~orbit_server.weave.kinds.Planner`'s, on top of this.

Work cap (W9): one advancement enters at most ``WORK_CAP`` steps without a task; past that
the step is written ``pending`` and due now, and the wait loop continues in a new
transaction. An instance makes at most ``max_step_executions`` step executions in all (items
and rounds included); the one that would pass it fails the instance, ``step_limit_exceeded``.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

from orbit_server.pulse.model import Owner
from orbit_server.weave import engine
from orbit_server.weave.definition import (
    Definition,
    MapStep,
    PollStep,
    SignalStep,
    Step,
    TaskFields,
    TaskStep,
)
from orbit_server.weave.engine import (
    ACTIVE,
    FINISHED,
    Limits,
    Outcome,
    StepState,
    WorkflowState,
    broken,
    failed,
)
from orbit_server.weave.expr import ExpressionFailed
from orbit_server.weave.model import StepExecution
from orbit_server.weave.states import (
    StepEvent,
    WorkflowEvent,
    step_after,
    workflow_after,
)
from orbit_server.weave.view import Active, Missing, Plan, Rows, TaskOrder, View

WORK_CAP = 100
DEFER = timedelta(seconds=1)  # a step task that met a full queue is tried again after this


class Walk:
    """The working state of one plan: the view's rows as this plan changes them."""

    def __init__(self, definition: Definition, view: View, now: datetime, limits: Limits) -> None:
        self.definition = definition
        self.view = view
        self.now = now
        self.limits = limits
        self.wf = view.workflow
        self.context: dict[str, Any] = {
            "steps": dict(self.wf.context.get("steps", {})),
            "visits": dict(self.wf.context.get("visits", {})),
            "seq": int(self.wf.context.get("seq", 0)),
        }
        self.plan = Plan(workflow=self.wf, was_finished=self.wf.state in FINISHED, now=now)
        self.rows: dict[str, StepExecution] = {}  # made or changed by this plan
        self.new: list[str] = []
        self.dirty: set[str] = set()
        self.entered = 0
        self.review_changed = False  # a step entered or left needs_review
        self.rearm = False  # a resume: parked waits have their wake time again
        self.room = None if view.room is None else dict(view.room)
        self.delivered: set[str] = set()  # signals this plan delivers

    # -- reading and writing rows -------------------------------------------------------------

    @property
    def paused(self) -> bool:
        return self.wf.state == WorkflowState.PAUSED

    @property
    def finished(self) -> bool:
        return self.wf.state in FINISHED

    def row(self, key: str, *, with_keys: tuple[str, ...] = ()) -> StepExecution | None:
        """An execution as this plan has it; when the view lacks it, the plan needs it (and
        ``with_keys`` read at once)."""
        found = self.rows.get(key)
        if found is not None:
            return found
        if key not in self.view.rows:
            raise Missing(Rows(with_keys or (key,)))
        return self._seen(self.view.rows[key])

    def _seen(self, row: StepExecution | None) -> StepExecution | None:
        """A stored row as the plan sees it (a resume re-arms parked waits first)."""
        if row is None or not self.rearm:
            return row
        parked = row.wake_at is None and row.due_at is not None
        if parked and row.state in ACTIVE and row.state != StepState.NEEDS_REVIEW:
            return dataclasses.replace(row, wake_at=row.due_at)
        return row

    def active(self) -> list[StepExecution]:
        """Every active execution, as this plan has it, in the order they began."""
        if self.view.active is None:
            raise Missing(Active())
        known: dict[str, StepExecution] = {}
        for stored in self.view.active:
            seen = self._seen(stored)
            assert seen is not None
            known[stored.key] = seen
        for key, stored_row in self.view.rows.items():
            seen = self._seen(stored_row)
            if seen is not None:
                known.setdefault(key, seen)
        known.update(self.rows)
        return sorted((r for r in known.values() if r.state in ACTIVE), key=lambda r: r.seq)

    def put(self, row: StepExecution, **changes: Any) -> StepExecution:
        """A change of an execution's fields other than its state."""
        assert "state" not in changes
        return self._write(dataclasses.replace(row, updated_at=self.now, **changes))

    def move(self, row: StepExecution, event: StepEvent, **changes: Any) -> StepExecution:
        """A change of an execution's state, by the step table."""
        state = step_after(row.state, event)
        if StepState.NEEDS_REVIEW in (row.state, state) and row.state != state:
            self.review_changed = True
        changes["state"] = str(state)  # plain strings: expressions see them
        return self._write(dataclasses.replace(row, updated_at=self.now, **changes))

    def _write(self, row: StepExecution) -> StepExecution:
        self.rows[row.key] = row
        if row.key not in self.new:
            self.dirty.add(row.key)
        self.plan.changed = True
        return row

    def create(
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
    ) -> StepExecution:
        self.context["seq"] += 1
        row = StepExecution(
            workflow_id=self.wf.id, key=key, seq=self.context["seq"], step=step, kind=kind,
            state=StepState.PENDING, parent_key=parent_key, branch=branch, item=item,
            round=round_, task_id=None, tries=0, input=input_, output=None, error=None,
            progress=None, followed=False, due_at=None, wake_at=None, started_at=self.now,
            ended_at=None, updated_at=self.now,
        )  # fmt: skip
        self.rows[key] = row
        self.new.append(key)
        self.plan.changed = True
        return row

    def data(self, **extra: Any) -> dict[str, Any]:
        """The variables an expression sees."""
        return {"input": self.wf.input, "steps": self.context["steps"], **extra}

    def steer(self, event: WorkflowEvent, **changes: Any) -> None:
        """A change of the instance's state, by the instance table."""
        state = workflow_after(self.wf.state, event)
        self.wf = dataclasses.replace(self.wf, state=WorkflowState(state), **changes)
        self.plan.changed = True

    # -- entering steps -----------------------------------------------------------------------

    def enter(self, step_id: str, *, parent_key: str | None, branch: str | None, prev: Any) -> None:
        """A new execution of ``step_id``, begun now or (past the work cap) due now."""
        if self.over_limit(1):
            return
        step = self.definition.steps[step_id]
        visit = int(self.context["visits"].get(step_id, 0)) + 1
        self.context["visits"][step_id] = visit
        row = self.create(
            engine.step_key(step_id, visit), step_id, _kind(step),
            parent_key=parent_key, branch=branch, input_=prev,
        )  # fmt: skip
        if self.entered >= WORK_CAP and not isinstance(step, TaskStep):
            self.put(row, due_at=self.now, wake_at=self.now)
            return
        self.begin(row)

    def over_limit(self, more: int) -> bool:
        """Whether ``more`` step executions would take the instance past its limit; if so it
        ends ``failed`` (``step_limit_exceeded``) instead."""
        made = int(self.context["seq"])
        limit = self.limits.max_step_executions
        if made + more <= limit:
            return False
        message = (
            f"the workflow made {made} step executions and needs {more} more; an instance may "
            f"make at most {limit} (ORBIT_WORKFLOW_MAX_STEP_EXECUTIONS)"
        )
        self.finish(WorkflowEvent.FAIL, error=failed("step_limit_exceeded", message))
        return True

    def begin(self, row: StepExecution) -> None:
        """Start a pending execution according to its step's kind."""
        step = self.definition.steps[row.step]
        row = self.put(row, due_at=None, wake_at=None)
        if not isinstance(step, TaskStep):
            self.entered += 1
        try:
            self.begin_kind(row, step)
        except ExpressionFailed as exc:
            self.complete(row, Outcome.FAILED, error=broken(exc, step=row.key))

    def start_pending(self, row: StepExecution) -> None:
        """Begin a pending execution that waited (past the work cap, or for room in a full
        queue): a step, a map's item or a poll's round."""
        if row.item is None and row.round is None:
            self.begin(row)
            return
        try:
            self.start_task(row)
        except ExpressionFailed as exc:
            self.complete(row, Outcome.FAILED, error=broken(exc, step=row.key))

    def task_of(self, row: StepExecution) -> tuple[TaskFields, dict[str, Any]]:
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

    def start_task(self, row: StepExecution, event: StepEvent = StepEvent.START) -> None:
        """A task for the execution, created with the plan (or, its queue full, a wait)."""
        fields, data = self.task_of(row)
        spec = engine.task_spec(
            self.definition, row.step, fields, data,
            owner=Owner("workflow", self.wf.id, row.key), gate_id=self.wf.gate_id,
            max_params_bytes=self.limits.max_params_bytes,
        )  # fmt: skip
        if self.room is not None and self.room.get(spec.queue, 1) <= 0:
            # Its queue is full: the execution waits, and the wait loop tries again.
            due = self.now + DEFER
            self.move(row, StepEvent.DEFER, due_at=due, wake_at=due)
            return
        if self.room is not None and spec.queue in self.room:
            self.room[spec.queue] -= 1
        placeholder = f"+{self.wf.id}/{row.key}/{row.tries + 1}"  # never a task's id
        self.plan.tasks.append(TaskOrder(key=row.key, placeholder=placeholder, spec=spec))
        self.move(row, event, task_id=placeholder, tries=row.tries + 1, due_at=None, wake_at=None)

    # -- outcomes -----------------------------------------------------------------------------

    def complete(
        self,
        row: StepExecution,
        outcome: Outcome,
        *,
        output: Any = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        """Record how an execution ended and, unless the instance is paused, follow it."""
        event = StepEvent.SUCCEED if outcome is Outcome.SUCCEEDED else StepEvent.FAIL
        row = self.move(row, event, output=output, error=error, ended_at=self.now, due_at=None,
                        wake_at=None, followed=False)  # fmt: skip
        self.record(row)
        if not self.paused:
            self.follow(row)

    def record(self, row: StepExecution) -> None:
        """Make a step's latest execution visible to expressions as ``steps.<id>``."""
        if row.item is None and row.round is None:
            self.context["steps"][row.step] = {
                "output": row.output,
                "error": row.error,
                "state": str(row.state),
            }

    def follow(self, row: StepExecution) -> None:
        """Go on from an ended execution (once: ``followed`` marks it)."""
        if self.finished:
            return
        row = self.put(row, followed=True)
        step = self.definition.steps[row.step]
        outcome = _outcome_of(row, step)
        parent = None
        if row.parent_key is not None:
            parent = self.row(row.parent_key)
            if parent is None or parent.state not in (StepState.RUNNING, StepState.WAITING):
                return  # the container ended meanwhile (failed, skipped, cancelled)
        if parent is not None and row.item is not None:
            self.item_ended(parent, row, outcome)
            return
        if parent is not None and row.round is not None:
            self.round_ended(parent, row, outcome)
            return
        decided = engine.transition(step, outcome, row.error)
        if isinstance(decided, engine.Goto):
            self.enter(decided.step, parent_key=row.parent_key, branch=row.branch, prev=row.output)
        elif isinstance(decided, engine.ListEnd) or _is_succeed(step):
            own = _is_succeed(step) and getattr(step, "output", None) is not None
            self.list_ended(row.parent_key, row.branch, row.output, own=own)
        elif isinstance(decided, engine.Failure):
            error = decided.error
            if row.parent_key is None and error.get("step") != row.key:
                # The instance's error names its top-level step (which retry or skip take),
                # and the execution inside it that failed first.
                error = {**error, "step": row.key, "cause": error.get("step")}
            self.fail_list(row.parent_key, error)

    def list_ended(
        self, parent_key: str | None, branch: str | None, output: Any, *, own: bool = False
    ) -> None:
        """A step list ran out, or a ``succeed`` step ended it (``own``: with its own output,
        which the definition's ``output`` does not replace)."""
        if parent_key is None:
            expression = None if own else self.definition.expr("", "output")
            try:
                final = output if expression is None else expression.evaluate(self.data())
            except ExpressionFailed as exc:
                self.finish(WorkflowEvent.FAIL, error=broken(exc))
                return
            self.finish(WorkflowEvent.SUCCEED, output=final)
            return
        parent = self.row(parent_key)
        if parent is None or parent.state != StepState.RUNNING or parent.progress is None:
            return
        self.branch_ended(parent, branch, output)

    def fail_list(self, parent_key: str | None, error: dict[str, Any]) -> None:
        if parent_key is None:
            self.finish(WorkflowEvent.FAIL, error=error)
            return
        parent = self.row(parent_key)
        if parent is None or parent.state not in (StepState.RUNNING, StepState.WAITING):
            return
        self.fail_container(parent, error)

    def fail_container(self, parent: StepExecution, error: dict[str, Any]) -> None:
        """A branch or an item failed: stop the container's other work, then the container
        fails (and follows its own failure transition)."""
        self.cancel_active(under=parent.key, reason="a sibling failed")
        self.complete(self.rows.get(parent.key, parent), Outcome.FAILED, error=error)

    # -- what each kind of step does (:class:`~orbit_server.weave.kinds.Planner`) -----------

    def begin_kind(self, row: StepExecution, step: Step) -> None:
        raise NotImplementedError

    def item_ended(self, parent: StepExecution, child: StepExecution, outcome: Outcome) -> None:
        raise NotImplementedError

    def round_ended(self, parent: StepExecution, child: StepExecution, outcome: Outcome) -> None:
        raise NotImplementedError

    def branch_ended(self, parent: StepExecution, branch: str | None, output: Any) -> None:
        raise NotImplementedError

    # -- the instance -------------------------------------------------------------------------

    def finish(
        self, event: WorkflowEvent, *, output: Any = None, error: dict[str, Any] | None = None
    ) -> None:
        if self.finished:
            return
        state = workflow_after(self.wf.state, event)
        self.cancel_active(under=None, reason=f"the workflow {state}")
        self.steer(event, output=output, error=error, finished_at=self.now)

    def cancel_active(self, *, under: str | None, reason: str) -> None:
        """Cancel active executions (all, or those under one container) and their tasks."""
        active = self.active()
        if under is not None:
            known = {r.key: r for r in active}
            active = [r for r in active if self._descends(r, under, known)]
        for seen in active:
            current = self.cancel_task(seen, reason=reason)
            self.move(current, StepEvent.CANCEL, ended_at=self.now, due_at=None, wake_at=None,
                      followed=True)  # fmt: skip

    def cancel_task(self, row: StepExecution, *, reason: str) -> StepExecution:
        """Cancel the running execution's task through Pulse (a started one is asked to stop);
        answers the row as it is left."""
        if row.task_id is None or row.state != StepState.RUNNING:
            return row
        unborn = [t for t in self.plan.tasks if t.placeholder == row.task_id]
        if unborn:  # made by this plan and not created yet: it never exists
            self.plan.tasks.remove(unborn[0])
            return self.put(row, task_id=None)
        self.plan.cancels.append((row.task_id, reason))
        return row

    def _descends(self, row: StepExecution, ancestor: str, known: dict[str, StepExecution]) -> bool:
        parent = row.parent_key
        seen = 0
        while parent is not None and seen < 64:
            if parent == ancestor:
                return True
            above = self.rows.get(parent) or known.get(parent) or self.view.rows.get(parent)
            parent = None if above is None else above.parent_key
            seen += 1
        return False


def _is_succeed(step: Step) -> bool:
    return _kind(step) == "succeed"


def _kind(step: Step) -> str:
    tag = type(step).__struct_config__.tag
    return str(tag)


def _outcome_of(row: StepExecution, step: Step) -> Outcome:
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
