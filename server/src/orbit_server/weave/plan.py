"""Weave's planner (decision 0020): ``plan(definition, view, events, now) -> Plan``, pure.

Events in, writes out, the way Temporal's workflow core takes an activation and answers
commands: the planner reads the :class:`~orbit_server.weave.view.View` of one locked
instance, applies the events in order (a task's result, a due wait, a signal, an operator's
control), follows the definition from there, and answers a :class:`~orbit_server.weave.view.Plan`
that :mod:`orbit_server.weave.apply` writes. When the view lacks a read (a container's row, a
map's items, the active executions a finish cancels), the plan names it in ``needs``
instead; the caller reads it into the view and plans again (the same plan, completed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

from orbit_server.errors import IdempotencyConflict, NotFound, StateConflict
from orbit_server.pulse.states import EMITS_EVENT
from orbit_server.weave.definition import Definition, MapStep, PollStep, SignalStep, TimerStep
from orbit_server.weave.engine import (
    ACTIVE,
    ENDED,
    FINISHED,
    Limits,
    Outcome,
    StepState,
    WorkflowState,
)
from orbit_server.weave.expr import ExpressionFailed
from orbit_server.weave.kinds import Planner
from orbit_server.weave.model import StepExecution
from orbit_server.weave.states import SignalState, StepEvent, WorkflowEvent, review_settled
from orbit_server.weave.view import (
    Cancel,
    Due,
    Event,
    Missing,
    Pause,
    Plan,
    Resolution,
    ResolveStep,
    Resume,
    RetryStep,
    Reviewing,
    SignalByKey,
    SignalSent,
    SkipStep,
    Start,
    TaskEnded,
    Unfollowed,
    View,
)

DEFAULT_LIMITS = Limits()


def plan(
    definition: Definition,
    view: View,
    events: Sequence[Event],
    now: datetime,
    limits: Limits = DEFAULT_LIMITS,
) -> Plan:
    """The writes that ``events`` make of the instance ``view`` shows, or (``needs``) the
    first read it lacks. Raises ``StateConflict``, ``NotFound`` or ``IdempotencyConflict``
    for an operator's call the instance's state refuses."""
    walk = Planner(definition, view, now, limits)
    try:
        for event in events:
            _react(walk, event)
        return _settled(walk)
    except Missing as missing:
        return Plan(
            workflow=view.workflow,
            was_finished=view.workflow.state in FINISHED,
            needs=[missing.need],
            now=now,
        )


def _react(walk: Planner, event: Event) -> None:
    if isinstance(event, Start):
        walk.enter(walk.definition.starts[None], parent_key=None, branch=None, prev=event.input)
    elif isinstance(event, TaskEnded):
        _task_ended(walk, event)
    elif isinstance(event, Due):
        _due(walk, event.key)
    elif isinstance(event, SignalSent):
        _signal(walk, event)
    elif isinstance(event, Pause):
        if walk.finished:
            raise StateConflict(f"a {walk.wf.state} workflow cannot be paused")
        if not walk.paused:
            walk.plan.gate_open = False
            _steer(walk, WorkflowEvent.PAUSE)
    elif isinstance(event, Resume):
        _resume(walk)
    elif isinstance(event, Cancel):
        if walk.finished:
            if walk.wf.state == WorkflowState.CANCELLED:
                return
            raise StateConflict(f"a {walk.wf.state} workflow cannot be cancelled")
        error = {"code": "cancelled", "message": event.reason or "cancelled on request"}
        walk.finish(WorkflowEvent.CANCEL, error=error)
    elif isinstance(event, RetryStep):
        _retry(walk, event.key)
    elif isinstance(event, SkipStep):
        _skip(walk, event)
    elif isinstance(event, ResolveStep):
        row = _step_of(walk, event.key)
        if row.state != StepState.NEEDS_REVIEW or row.task_id is None:
            raise StateConflict(f"only a needs_review step can be resolved, not {row.state}")
        walk.plan.audit = True  # the change is the task's; its result event moves the step
        walk.plan.resolution = Resolution(row.task_id, event.succeeded, event.output, event.error)


def _task_ended(walk: Planner, event: TaskEnded) -> None:
    task = event.task
    if walk.finished or task.owner_step is None:
        return
    row = walk.row(task.owner_step)
    if (
        row is None
        or row.task_id != task.id
        or row.state not in (StepState.RUNNING, StepState.NEEDS_REVIEW)
    ):
        return  # a stale task: cancelled, skipped or retried since
    if task.state != event.state:
        # The task moved on since (an operator retried it out of needs_review): its next
        # result event tells the outcome.
        if row.state == StepState.NEEDS_REVIEW and task.state not in EMITS_EVENT:
            walk.move(row, StepEvent.RETRIED)
        return
    walk.task_ended(row, task.state, task.result, task.error, task.id)


def _due(walk: Planner, key: str) -> None:
    """A due wait, checked again under the instance's lock."""
    row = walk.row(key)
    if row is None or row.wake_at is None or row.wake_at > walk.now:
        return  # changed meanwhile
    if walk.finished or walk.paused:
        walk.put(row, wake_at=None)  # paused: parked, and resume re-arms it
        return
    step = walk.definition.steps[row.step]
    if row.state == StepState.PENDING:
        walk.start_pending(row)
    elif row.state == StepState.WAITING and isinstance(step, TimerStep):
        walk.complete(row, Outcome.SUCCEEDED)
    elif row.state == StepState.WAITING and isinstance(step, SignalStep):
        error = {
            "code": "signal_timeout",
            "message": f"no signal {step.name!r} came in time",
            "step": row.key,
        }
        walk.complete(row, Outcome.TIMED_OUT, error=error)
    elif row.state == StepState.WAITING and isinstance(step, PollStep):
        walk.next_round(row)
    elif row.state == StepState.RUNNING and isinstance(step, MapStep) and row.item is None:
        walk.refill(walk.put(row, due_at=None, wake_at=None))
    else:
        walk.put(row, due_at=None, wake_at=None)


def _signal(walk: Planner, event: SignalSent) -> None:
    """Record a signal and deliver it to the execution waiting for it, if one does; the same
    idempotency key again answers the first signal and changes nothing."""
    signal = event.signal
    key = signal.idempotency_key
    if key is not None:
        if key not in walk.view.signal_keys:
            raise Missing(SignalByKey(key))
        seen = walk.view.signal_keys[key]
        if seen is not None:
            if seen.name != signal.name or seen.payload != signal.payload:
                raise IdempotencyConflict(
                    "this idempotency key was used for another signal; use a new key"
                )
            walk.plan.answer = seen
            return
    if walk.finished:
        raise StateConflict(f"the workflow is {walk.wf.state}; it takes no signals")
    walk.plan.signals.append(signal)
    walk.plan.answer = signal
    for row in walk.active():
        step = walk.definition.steps[row.step]
        if row.state != StepState.WAITING or row.kind != "signal":
            continue
        if getattr(step, "name", None) == signal.name:
            walk.plan.deliveries.append((signal.id, row.key))
            walk.deliver(row, signal.payload)
            walk.plan.answer = dataclasses.replace(
                signal, state=SignalState.DELIVERED, step_key=row.key
            )
            return


def _resume(walk: Planner) -> None:
    if not walk.paused:
        raise StateConflict(f"a {walk.wf.state} workflow cannot be resumed")
    if walk.view.unfollowed is None:
        raise Missing(Unfollowed())
    walk.plan.gate_open = True
    _steer(walk, WorkflowEvent.RESUME)
    walk.plan.rearm = walk.rearm = True
    for stored in walk.view.unfollowed:
        current = walk.rows.get(stored.key) or walk._seen(stored)
        assert current is not None
        if not current.followed and current.state in ENDED:  # not changed meanwhile
            walk.follow(current)


def _retry(walk: Planner, key: str) -> None:
    """A new task for a failed task step that ended the instance; it runs again."""
    row = _step_of(walk, key)
    failed_here = walk.wf.state == WorkflowState.FAILED and (walk.wf.error or {}).get("step") == key
    if row.state != StepState.FAILED or not failed_here:
        raise StateConflict("only the failed step that ended the workflow can be retried")
    if row.kind != "task" or row.parent_key is not None:
        raise StateConflict(
            "only a task step outside parallel branches can be retried; "
            "skip it with an output instead"
        )
    _steer(walk, WorkflowEvent.REOPEN, error=None, finished_at=None)
    try:
        row = walk.put(row, error=None, ended_at=None, followed=False)
        walk.start_task(row, StepEvent.RETRY)
    except ExpressionFailed as exc:
        raise StateConflict(f"the step's task cannot be made: {exc}") from None


def _skip(walk: Planner, event: SkipStep) -> None:
    """End a step ``skipped`` with the given output and go on as if it had succeeded."""
    row = _step_of(walk, event.key)
    if row.item is not None or row.round is not None:
        raise StateConflict("map items and poll rounds cannot be skipped; skip the step")
    failed_here = (
        walk.wf.state == WorkflowState.FAILED
        and (walk.wf.error or {}).get("step") == event.key
        and row.parent_key is None
    )
    if failed_here:
        _steer(walk, WorkflowEvent.REOPEN, error=None, finished_at=None)
    elif walk.finished or row.state not in ACTIVE:
        raise StateConflict(f"a {row.state} step of a {walk.wf.state} workflow cannot be skipped")
    if row.kind in ("parallel", "map", "poll"):
        walk.cancel_active(under=row.key, reason="the step was skipped")
    if row.task_id is not None and row.state == StepState.RUNNING:
        row = walk.cancel_task(row, reason="the step was skipped")
    row = walk.move(
        row, StepEvent.SKIP, output=event.output, error=None, ended_at=walk.now, due_at=None,
        wake_at=None, followed=False,
    )  # fmt: skip
    walk.record(row)
    if not walk.paused:
        walk.follow(row)


def _step_of(walk: Planner, key: str) -> StepExecution:
    row = walk.row(key)
    if row is None:
        raise NotFound(f"the workflow has no step {key!r}")
    return row


def _steer(walk: Planner, event: WorkflowEvent, **changes: object) -> None:
    """An operator's change of the instance's state: a new control version. Running again,
    its state is settled with the plan (``needs_review`` while a step waits for review)."""
    walk.steer(event, control_version=walk.wf.control_version + 1, **changes)
    if walk.wf.state == WorkflowState.RUNNING:
        walk.review_changed = True


def _settled(walk: Planner) -> Plan:
    """The plan as it stands after the events: its rows, the instance's state and context."""
    plan = walk.plan
    plan.new_instance = walk.view.new_instance
    if plan.changed or plan.new_instance:
        state = walk.wf.state
        reviewable = state in (WorkflowState.RUNNING, WorkflowState.NEEDS_REVIEW)
        if reviewable and (walk.review_changed or state == WorkflowState.NEEDS_REVIEW):
            state = review_settled(state, _reviewing(walk) > 0)
        walk.wf = dataclasses.replace(
            walk.wf, state=WorkflowState(state), context=walk.context, updated_at=walk.now
        )
    plan.workflow = walk.wf
    plan.new_rows = [walk.rows[k] for k in walk.new]
    plan.changed_rows = [walk.rows[k] for k in sorted(walk.dirty)]
    return plan


def _reviewing(walk: Planner) -> int:
    """Executions in needs_review once the plan is written: as stored, and this plan's."""
    if walk.view.reviewing is None:
        if walk.view.new_instance:
            stored = 0
        else:
            raise Missing(Reviewing())
    else:
        stored = walk.view.reviewing
    review = StepState.NEEDS_REVIEW
    count = stored + sum(1 for k in walk.new if walk.rows[k].state == review)
    for key in walk.dirty:
        before = walk.view.rows.get(key)
        was = before is not None and before.state == review
        count += int(walk.rows[key].state == review) - int(was)
    return count
