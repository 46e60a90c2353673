"""Control and recovery of instances (SPEC W7, W8): pause, resume, cancel; an operator's
retry, skip and resolve of a step. Each is one transaction through the service's
``run_locked`` (the instance locked first), audited with the change."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from orbit_server.audit import Actor
from orbit_server.errors import NotFound, StateConflict
from orbit_server.pulse.gates import GateService
from orbit_server.pulse.service import TaskService
from orbit_server.scope import Scope
from orbit_server.store import weave as store
from orbit_server.store.weave import StepRecord, WorkflowRecord
from orbit_server.weave.advance import Advance
from orbit_server.weave.engine import ACTIVE, ENDED, StepState, WorkflowState
from orbit_server.weave.expr import ExpressionFailed

T = TypeVar("T")


class Control:
    """Mixed into :class:`~orbit_server.weave.service.WorkflowService`."""

    _tasks: TaskService
    _gates: GateService

    if TYPE_CHECKING:

        async def run_locked(
            self,
            scope: Scope | None,
            workflow_id: str,
            act: Callable[[Advance], Awaitable[T]],
            *,
            actor: Actor | None = None,
            action: str | None = None,
            details: dict[str, Any] | None = None,
        ) -> tuple[T, WorkflowRecord]: ...

    async def pause(
        self, scope: Scope, workflow_id: str, *, reason: str | None, actor: Actor
    ) -> WorkflowRecord:
        """Close the instance's gate and stop following outcomes until resumed."""

        async def act(advance: Advance) -> None:
            if advance.finished:
                raise StateConflict(f"a {advance.wf.state} workflow cannot be paused")
            if advance.paused:
                return
            await self._gates.set_open_in(advance.tx, scope, advance.wf.gate_id, open_=False)
            _steer(advance, WorkflowState.PAUSED)

        _, workflow = await self.run_locked(
            scope, workflow_id, act, actor=actor, action="workflow.pause",
            details={"reason": reason},
        )  # fmt: skip
        return workflow

    async def resume(
        self, scope: Scope, workflow_id: str, *, reason: str | None, actor: Actor
    ) -> WorkflowRecord:
        """Reopen the gate and go on from what was recorded while paused."""

        async def act(advance: Advance) -> None:
            if not advance.paused:
                raise StateConflict(f"a {advance.wf.state} workflow cannot be resumed")
            await self._gates.set_open_in(advance.tx, scope, advance.wf.gate_id, open_=True)
            _steer(advance, WorkflowState.RUNNING)
            await store.workflow_steps_rearm(advance.tx, workflow_id)
            for row in await store.workflow_steps_unfollowed(advance.tx, workflow_id):
                current = advance.rows.setdefault(row.key, row)
                if not current.followed and current.state in ENDED:  # not changed meanwhile
                    await advance.follow(current)

        _, workflow = await self.run_locked(
            scope, workflow_id, act, actor=actor, action="workflow.resume",
            details={"reason": reason},
        )  # fmt: skip
        return workflow

    async def cancel(
        self, scope: Scope, workflow_id: str, *, reason: str | None, actor: Actor
    ) -> WorkflowRecord:
        """End the instance ``cancelled``; its pending and running step tasks are cancelled
        through Pulse in the same transaction."""

        async def act(advance: Advance) -> None:
            if advance.finished:
                if advance.wf.state == WorkflowState.CANCELLED:
                    return
                raise StateConflict(f"a {advance.wf.state} workflow cannot be cancelled")
            error = {"code": "cancelled", "message": reason or "cancelled on request"}
            await advance.finish(WorkflowState.CANCELLED, error=error)

        _, workflow = await self.run_locked(
            scope, workflow_id, act, actor=actor, action="workflow.cancel",
            details={"reason": reason},
        )  # fmt: skip
        return workflow

    async def retry_step(
        self, scope: Scope, workflow_id: str, key: str, *, actor: Actor
    ) -> WorkflowRecord:
        """A new task for a failed task step that ended the instance; it runs again."""

        async def act(advance: Advance) -> None:
            row = await _step_of(advance, key)
            failed_here = (
                advance.wf.state == WorkflowState.FAILED
                and (advance.wf.error or {}).get("step") == key
            )
            if row.state != StepState.FAILED or not failed_here:
                raise StateConflict("only the failed step that ended the workflow can be retried")
            if row.kind != "task" or row.parent_key is not None:
                raise StateConflict(
                    "only a task step outside parallel branches can be retried; "
                    "skip it with an output instead"
                )
            _reopen(advance)
            try:
                advance.new_task_for(advance.put(row, error=None, ended_at=None, followed=False))
            except ExpressionFailed as exc:
                raise StateConflict(f"the step's task cannot be made: {exc}") from None

        _, workflow = await self.run_locked(
            scope, workflow_id, act, actor=actor, action="workflow.step.retry",
            details={"step": key},
        )  # fmt: skip
        return workflow

    async def skip_step(
        self, scope: Scope, workflow_id: str, key: str, *, output: Any, actor: Actor
    ) -> WorkflowRecord:
        """End a step ``skipped`` with the given output and go on as if it had succeeded."""

        async def act(advance: Advance) -> None:
            row = await _step_of(advance, key)
            if row.item is not None or row.round is not None:
                raise StateConflict("map items and poll rounds cannot be skipped; skip the step")
            failed_here = (
                advance.wf.state == WorkflowState.FAILED
                and (advance.wf.error or {}).get("step") == key
                and row.parent_key is None
            )
            if failed_here:
                _reopen(advance)
            elif advance.finished or row.state not in ACTIVE:
                raise StateConflict(f"a {row.state} step of a {advance.wf.state} workflow "
                                    "cannot be skipped")  # fmt: skip
            if row.kind in ("parallel", "map", "poll"):
                await advance.cancel_active(under=row.key, reason="the step was skipped")
            if row.task_id is not None and row.state == StepState.RUNNING:
                await advance.cancel_task(row, reason="the step was skipped")
            row = advance.put(
                row, state=StepState.SKIPPED, output=output, error=None, ended_at=advance.now,
                due_at=None, wake_at=None, followed=False,
            )  # fmt: skip
            advance.record(row)
            if not advance.paused:
                await advance.follow(row)

        _, workflow = await self.run_locked(
            scope, workflow_id, act, actor=actor, action="workflow.step.skip",
            details={"step": key},
        )  # fmt: skip
        return workflow

    async def resolve_step(
        self,
        scope: Scope,
        workflow_id: str,
        key: str,
        *,
        succeeded: bool,
        output: Any,
        error: dict[str, Any] | None,
        actor: Actor,
    ) -> WorkflowRecord:
        """Decide a step whose task is in needs_review: its task is resolved through Pulse,
        and its result event moves the instance on (boundary 2)."""

        async def act(advance: Advance) -> None:
            row = await _step_of(advance, key)
            if row.state != StepState.NEEDS_REVIEW or row.task_id is None:
                raise StateConflict(f"only a needs_review step can be resolved, not {row.state}")
            advance.audit = True  # the change is the task's; the event moves the step
            await self._tasks.resolve_in(
                advance.tx, advance.wf.scope, row.task_id, succeeded=succeeded,
                result=output, error=error, actor=actor,
            )  # fmt: skip

        _, workflow = await self.run_locked(
            scope, workflow_id, act, actor=actor, action="workflow.step.resolve",
            details={"step": key, "outcome": "succeeded" if succeeded else "failed"},
        )  # fmt: skip
        return workflow


async def _step_of(advance: Advance, key: str) -> StepRecord:
    row = await advance.row(key)
    if row is None:
        raise NotFound(f"the workflow has no step {key!r}")
    return row


def _reopen(advance: Advance) -> None:
    """A failed instance runs again (an operator's retry or skip of the step that failed it)."""
    _steer(advance, WorkflowState.RUNNING, error=None, finished_at=None)


def _steer(advance: Advance, state: WorkflowState, **changes: Any) -> None:
    """An operator's change of the instance's state: a new control version. Running again,
    its state is settled at the flush (``needs_review`` while a step waits for review)."""
    advance.wf = replace(
        advance.wf, state=str(state), control_version=advance.wf.control_version + 1, **changes
    )
    advance.changed = True
    if state == WorkflowState.RUNNING:
        advance.review_changed = True
