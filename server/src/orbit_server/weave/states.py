"""The state machines of Weave (API.md "Workflow states", SPEC W2–W8): one table for an
instance, one for a step execution, pure functions.

Every change of an instance's or a step execution's state in the planner goes through
:func:`workflow_after` or :func:`step_after`; anything the tables do not list is a bug, not a
state. The diagrams in ``docs/explanation/workflow-states.md`` are checked against
:data:`WORKFLOW_TRANSITIONS` and :data:`STEP_TRANSITIONS` by a test.
"""

from __future__ import annotations

from enum import StrEnum


class WorkflowState(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    NEEDS_REVIEW = "needs_review"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINISHED = frozenset({WorkflowState.SUCCEEDED, WorkflowState.FAILED, WorkflowState.CANCELLED})


class StepState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    NEEDS_REVIEW = "needs_review"


class SignalState(StrEnum):
    PENDING = "pending"  # kept until an execution waits for it
    DELIVERED = "delivered"


ACTIVE = (StepState.PENDING, StepState.RUNNING, StepState.WAITING, StepState.NEEDS_REVIEW)
ENDED = (StepState.SUCCEEDED, StepState.FAILED, StepState.SKIPPED)
STEP_FINISHED = frozenset({*ENDED, StepState.CANCELLED})


class WorkflowEvent(StrEnum):
    START = "start"
    PAUSE = "pause"
    RESUME = "resume"  # running again; a step in review settles it needs_review
    REVIEW = "review"  # a step's task entered needs_review
    REVIEWED = "reviewed"  # no step is in review any more
    SUCCEED = "succeed"
    FAIL = "fail"  # a failure nothing handled, a limit, an advancement that failed
    CANCEL = "cancel"
    REOPEN = "reopen"  # an operator's retry or skip of the step that failed it


class StepEvent(StrEnum):
    CREATE = "create"
    DEFER = "defer"  # its task met a full queue: it waits, pending, and is tried again
    START = "start"  # its task is created, or a container begins, or a poll's round
    WAIT = "wait"  # a timer, a signal, a poll's interval
    REVIEW = "review"  # its task entered needs_review
    RETRIED = "retried"  # its task in review was retried by an operator
    SUCCEED = "succeed"
    FAIL = "fail"
    SKIP = "skip"  # an operator ends it with an output
    CANCEL = "cancel"
    RETRY = "retry"  # an operator's retry: a new task


W = WorkflowState
WE = WorkflowEvent

WORKFLOW_TRANSITIONS: dict[tuple[WorkflowState, WorkflowEvent], WorkflowState] = {
    (W.RUNNING, WE.PAUSE): W.PAUSED,
    (W.NEEDS_REVIEW, WE.PAUSE): W.PAUSED,
    (W.PAUSED, WE.RESUME): W.RUNNING,
    (W.RUNNING, WE.REVIEW): W.NEEDS_REVIEW,
    (W.NEEDS_REVIEW, WE.REVIEWED): W.RUNNING,
    (W.RUNNING, WE.SUCCEED): W.SUCCEEDED,
    (W.NEEDS_REVIEW, WE.SUCCEED): W.SUCCEEDED,
    (W.RUNNING, WE.FAIL): W.FAILED,
    (W.NEEDS_REVIEW, WE.FAIL): W.FAILED,
    (W.PAUSED, WE.FAIL): W.FAILED,
    (W.RUNNING, WE.CANCEL): W.CANCELLED,
    (W.NEEDS_REVIEW, WE.CANCEL): W.CANCELLED,
    (W.PAUSED, WE.CANCEL): W.CANCELLED,
    (W.FAILED, WE.REOPEN): W.RUNNING,
}
"""Every allowed (instance state, event) → next state."""

WORKFLOW_INITIAL: dict[WorkflowEvent, WorkflowState] = {WE.START: W.RUNNING}

S = StepState
SE = StepEvent

STEP_TRANSITIONS: dict[tuple[StepState, StepEvent], StepState] = {
    (S.PENDING, SE.DEFER): S.PENDING,
    (S.PENDING, SE.START): S.RUNNING,
    (S.WAITING, SE.START): S.RUNNING,
    (S.PENDING, SE.WAIT): S.WAITING,
    (S.RUNNING, SE.WAIT): S.WAITING,
    (S.RUNNING, SE.REVIEW): S.NEEDS_REVIEW,
    (S.NEEDS_REVIEW, SE.RETRIED): S.RUNNING,
    (S.PENDING, SE.SUCCEED): S.SUCCEEDED,
    (S.RUNNING, SE.SUCCEED): S.SUCCEEDED,
    (S.WAITING, SE.SUCCEED): S.SUCCEEDED,
    (S.NEEDS_REVIEW, SE.SUCCEED): S.SUCCEEDED,
    (S.PENDING, SE.FAIL): S.FAILED,
    (S.RUNNING, SE.FAIL): S.FAILED,
    (S.WAITING, SE.FAIL): S.FAILED,
    (S.NEEDS_REVIEW, SE.FAIL): S.FAILED,
    (S.PENDING, SE.CANCEL): S.CANCELLED,
    (S.RUNNING, SE.CANCEL): S.CANCELLED,
    (S.WAITING, SE.CANCEL): S.CANCELLED,
    (S.NEEDS_REVIEW, SE.CANCEL): S.CANCELLED,
    (S.PENDING, SE.SKIP): S.SKIPPED,
    (S.RUNNING, SE.SKIP): S.SKIPPED,
    (S.WAITING, SE.SKIP): S.SKIPPED,
    (S.NEEDS_REVIEW, SE.SKIP): S.SKIPPED,
    (S.FAILED, SE.SKIP): S.SKIPPED,
    (S.FAILED, SE.RETRY): S.RUNNING,
}
"""Every allowed (step execution state, event) → next state."""

STEP_INITIAL: dict[StepEvent, StepState] = {SE.CREATE: S.PENDING}


class IllegalTransition(Exception):
    def __init__(self, what: str, state: str, event: str) -> None:
        super().__init__(f"a {state} {what} does not accept {event}")
        self.state = state
        self.event = event


def workflow_after(state: str, event: WorkflowEvent) -> WorkflowState:
    """An instance's next state for ``event``, or :class:`IllegalTransition`."""
    try:
        return WORKFLOW_TRANSITIONS[(WorkflowState(state), event)]
    except KeyError:
        raise IllegalTransition("workflow", state, event) from None


def step_after(state: str, event: StepEvent) -> StepState:
    """A step execution's next state for ``event``, or :class:`IllegalTransition`."""
    try:
        return STEP_TRANSITIONS[(StepState(state), event)]
    except KeyError:
        raise IllegalTransition("step execution", state, event) from None


def review_settled(state: str, reviewing: bool) -> WorkflowState:
    """A running instance's state once its steps in review are counted: ``needs_review``
    while one is, ``running`` when none is any more (other states stay)."""
    current = WorkflowState(state)
    if current is W.RUNNING and reviewing:
        return workflow_after(current, WE.REVIEW)
    if current is W.NEEDS_REVIEW and not reviewing:
        return workflow_after(current, WE.REVIEWED)
    return current
