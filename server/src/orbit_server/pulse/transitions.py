"""A task's change of state as a value: the new state *and* everything the change writes
besides the task row (its attempt, the claim range, permits, queue counts, the result event).

:func:`transition` is pure: it reads the state table (:mod:`orbit_server.pulse.states`) and
answers a :class:`Transition`; :func:`orbit_server.pulse.apply.apply` writes any number of
them in the caller's transaction. No path that ends, returns, cancels, retries or resolves a
task re-codes an effect: each is derived here, once, from the pair of states.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from orbit_server.pulse.states import (
    HOLDS_PERMITS,
    AttemptState,
    Event,
    IllegalTransition,
    TaskState,
    decide,
)
from orbit_server.scope import Scope


class TaskRow(Protocol):
    """What a transition needs of the task it moves (a full row or a bulk path's lock)."""

    @property
    def id(self) -> str: ...
    @property
    def scope(self) -> Scope: ...
    @property
    def queue(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def lease_epoch(self) -> int: ...
    @property
    def concurrency_key(self) -> str | None: ...
    @property
    def gate_id(self) -> str | None: ...
    @property
    def owner_kind(self) -> str | None: ...
    @property
    def owner_id(self) -> str | None: ...
    @property
    def event_seq(self) -> int: ...


class RowWrite(StrEnum):
    """Which guarded statement moves the task row."""

    FINISH = "finish"  # a started attempt ends: an end state, needs_review or a retry's wait
    RETURN = "return"  # leased work that never started goes back to pending
    END_UNSTARTED = "end_unstarted"  # scheduled, pending or leased work is cancelled
    RESOLVE = "resolve"  # an operator's decision on needs_review
    REOPEN = "reopen"  # an operator's retry of an ended task


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """How the task's current attempt row ends."""

    state: AttemptState
    cause: str
    error: dict[str, Any] | None = None


# The cause an attempt's row records for a report of its worker.
REPORTED_CAUSE = {
    Event.COMPLETE: "completed",
    Event.CANCELLED_BY_WORKER: "cancelled",
    Event.CANCEL_SETTLED: "cancelled",
    Event.FAIL_RETRY: "error",
    Event.FAIL_FINAL: "error",
}


@dataclass(frozen=True, slots=True)
class Transition:
    task: TaskRow
    event: Event
    before: TaskState
    after: TaskState
    write: RowWrite
    attempt: AttemptEnd | None  # the attempt this ends, if any
    starts_attempt: bool  # an eager attempt whose report is its start too (decision 0008)
    releases_permits: bool  # leaves leased/running: queue and key permits come back
    leaves_range: bool  # leaves pending for good: its claim-range row (or key admission) goes
    claimable: bool  # pending again: into the claim range, or through its key's admission
    waiting_delta: int  # change of the queue's count of waiting tasks
    emits_result: bool  # a result event (SPEC P11)
    finished: bool  # terminal: ``finished_at`` is set
    result: Any = None
    error: dict[str, Any] | None = None
    run_at: datetime | None = None  # a retry's next time
    reason: str | None = None  # a cancel's

    @property
    def plain_success(self) -> bool:
        """A started (or eagerly starting) attempt that succeeded: the bulk case."""
        return self.write is RowWrite.FINISH and self.after is TaskState.SUCCEEDED


def _row_write(before: TaskState, after: TaskState, event: Event) -> RowWrite:
    if before is TaskState.RUNNING:
        return RowWrite.FINISH
    if before is TaskState.LEASED and after is TaskState.PENDING:
        return RowWrite.RETURN
    if after is TaskState.CANCELLED:
        return RowWrite.END_UNSTARTED
    if before is TaskState.NEEDS_REVIEW and after is not TaskState.PENDING:
        return RowWrite.RESOLVE
    if after is TaskState.PENDING and before in (
        TaskState.FAILED,
        TaskState.CANCELLED,
        TaskState.NEEDS_REVIEW,
    ):
        return RowWrite.REOPEN
    # Claims, starts and promotions move rows in their own set-wise statements.
    raise IllegalTransition(before, event)


def transition(
    task: TaskRow,
    event: Event,
    *,
    result: Any = None,
    error: dict[str, Any] | None = None,
    cause: str | None = None,
    run_at: datetime | None = None,
    reason: str | None = None,
) -> Transition:
    """``task`` (in its current state) taking ``event``; :class:`IllegalTransition` if the
    table has no such move. An eager attempt's success (a leased task whose report is its
    start too) is ``event`` COMPLETE from ``leased``: it passes through ``running``."""
    before = TaskState(task.state)
    starts = before is TaskState.LEASED and event is Event.COMPLETE
    if starts:
        decide(TaskState.LEASED, Event.START)
    decision = decide(TaskState.RUNNING if starts else before, event)
    after = decision.after
    write = RowWrite.FINISH if starts else _row_write(before, after, event)
    held = before in HOLDS_PERMITS
    attempt: AttemptEnd | None = None
    if write is RowWrite.FINISH:
        attempt = AttemptEnd(
            state=AttemptState.FAILED if after is TaskState.SCHEDULED else AttemptState(after),
            cause=cause or REPORTED_CAUSE.get(event, "error"),
            error=error,
        )
    elif write is RowWrite.RETURN:
        attempt = AttemptEnd(state=AttemptState.RELEASED, cause=cause or "released")
    elif write is RowWrite.END_UNSTARTED and before is TaskState.LEASED:
        attempt = AttemptEnd(state=AttemptState.CANCELLED, cause="cancel")
    waiting = (TaskState.PENDING, TaskState.SCHEDULED)
    if before in waiting and after not in waiting:
        waiting_delta = -1  # a cancel of work that was waiting
    elif not held and before not in waiting and after in waiting:
        waiting_delta = 1  # an operator's retry
    else:
        waiting_delta = 0  # leased/running work counts as waiting again through its permits
    return Transition(
        task=task,
        event=event,
        before=before,
        after=after,
        write=write,
        attempt=attempt,
        starts_attempt=starts,
        releases_permits=held and after not in HOLDS_PERMITS,
        leaves_range=before is TaskState.PENDING and after is not TaskState.PENDING,
        claimable=after is TaskState.PENDING,
        waiting_delta=waiting_delta,
        emits_result=decision.emits_event,
        finished=decision.finished,
        result=result if after is TaskState.SUCCEEDED else None,
        error=None if after is TaskState.SUCCEEDED else error,
        run_at=run_at,
        reason=reason,
    )
