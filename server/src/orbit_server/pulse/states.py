"""The task state machine (API.md "Task states", SPEC P2–P5): one table, pure functions.

Every change of a task's state goes through :func:`decide`, which answers the new state and the
effects the service must apply in the same transaction (release the key/queue permits, write a
result event, schedule a retry). The diagram in ``docs/explanation/states.md`` is checked
against :data:`TRANSITIONS` by a test.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class TaskState(StrEnum):
    SCHEDULED = "scheduled"
    PENDING = "pending"
    LEASED = "leased"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    NEEDS_REVIEW = "needs_review"


TERMINAL = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED})
# States that hold the queue's concurrency permit and the concurrency key's permit.
HOLDS_PERMITS = frozenset({TaskState.LEASED, TaskState.RUNNING})
# States that end with a result event (SPEC P11): the terminal ones and needs_review.
EMITS_EVENT = TERMINAL | {TaskState.NEEDS_REVIEW}


class AttemptState(StrEnum):
    """An attempt row's state: how far its lease got, and how it ended."""

    LEASED = "leased"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # also a failure that is retried: the next attempt is another row
    CANCELLED = "cancelled"
    NEEDS_REVIEW = "needs_review"
    RELEASED = "released"  # ended before it started (given back, expired, gate closed)


class SideEffect(StrEnum):
    IDEMPOTENT = "idempotent"
    UNSAFE = "unsafe"


class Event(StrEnum):
    SUBMIT_LATER = "submit_later"  # run_at in the future
    SUBMIT_NOW = "submit_now"
    DUE = "due"  # the run time has come
    CLAIM = "claim"
    RELEASE = "release"  # the worker gives back work it has not started
    LEASE_EXPIRED_UNSTARTED = "lease_expired_unstarted"
    START = "start"
    START_DENIED_GATE = "start_denied_gate"  # the task's gate closed after the claim
    CANCEL = "cancel"  # the cancel of a task that has not started
    COMPLETE = "complete"
    FAIL_RETRY = "fail_retry"  # retryable failure, attempts left: back off
    FAIL_FINAL = "fail_final"  # non-retryable or attempts exhausted
    CANCELLED_BY_WORKER = "cancelled_by_worker"
    CANCEL_SETTLED = "cancel_settled"  # cancel requested, and the attempt ended without success
    LEASE_LOST_RETRY = "lease_lost_retry"  # started, idempotent, attempts left
    LEASE_LOST_FINAL = "lease_lost_final"  # started, idempotent, attempts exhausted
    OUTCOME_UNKNOWN = "outcome_unknown"  # started, unsafe: an operator decides
    OPERATOR_RETRY = "operator_retry"
    RESOLVE_SUCCEEDED = "resolve_succeeded"
    RESOLVE_FAILED = "resolve_failed"


S = TaskState
E = Event

TRANSITIONS: dict[tuple[TaskState, Event], TaskState] = {
    (S.SCHEDULED, E.DUE): S.PENDING,
    (S.SCHEDULED, E.CANCEL): S.CANCELLED,
    (S.PENDING, E.CLAIM): S.LEASED,
    (S.PENDING, E.CANCEL): S.CANCELLED,
    (S.LEASED, E.RELEASE): S.PENDING,
    (S.LEASED, E.LEASE_EXPIRED_UNSTARTED): S.PENDING,
    (S.LEASED, E.START): S.RUNNING,
    (S.LEASED, E.START_DENIED_GATE): S.PENDING,
    (S.LEASED, E.CANCEL): S.CANCELLED,
    (S.RUNNING, E.COMPLETE): S.SUCCEEDED,
    (S.RUNNING, E.FAIL_RETRY): S.SCHEDULED,
    (S.RUNNING, E.FAIL_FINAL): S.FAILED,
    (S.RUNNING, E.CANCELLED_BY_WORKER): S.CANCELLED,
    (S.RUNNING, E.CANCEL_SETTLED): S.CANCELLED,
    (S.RUNNING, E.LEASE_LOST_RETRY): S.SCHEDULED,
    (S.RUNNING, E.LEASE_LOST_FINAL): S.FAILED,
    (S.RUNNING, E.OUTCOME_UNKNOWN): S.NEEDS_REVIEW,
    (S.FAILED, E.OPERATOR_RETRY): S.PENDING,
    (S.CANCELLED, E.OPERATOR_RETRY): S.PENDING,
    (S.NEEDS_REVIEW, E.OPERATOR_RETRY): S.PENDING,
    (S.NEEDS_REVIEW, E.RESOLVE_SUCCEEDED): S.SUCCEEDED,
    (S.NEEDS_REVIEW, E.RESOLVE_FAILED): S.FAILED,
}
"""Every allowed (state, event) → next state. Anything else is a state conflict."""

INITIAL: dict[Event, TaskState] = {E.SUBMIT_NOW: S.PENDING, E.SUBMIT_LATER: S.SCHEDULED}


class IllegalTransition(Exception):
    def __init__(self, state: TaskState, event: Event) -> None:
        super().__init__(f"a {state} task does not accept {event}")
        self.state = state
        self.event = event


@dataclass(frozen=True, slots=True)
class Decision:
    """What a transition means for the transaction that applies it."""

    before: TaskState
    after: TaskState
    releases_permits: bool  # leaves LEASED/RUNNING: give back queue and key permits
    takes_permits: bool  # enters LEASED: the claim took queue and key permits
    emits_event: bool  # enters a terminal state or needs_review (P11)
    ends_attempt: bool  # the current attempt is over
    finished: bool  # the task is terminal (finished_at is set)


def decide(state: TaskState, event: Event) -> Decision:
    """The next state for ``event``, or :class:`IllegalTransition`."""
    try:
        after = TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(state, event) from None
    return Decision(
        before=state,
        after=after,
        releases_permits=state in HOLDS_PERMITS and after not in HOLDS_PERMITS,
        takes_permits=after in HOLDS_PERMITS and state not in HOLDS_PERMITS,
        emits_event=after in EMITS_EVENT,
        ends_attempt=state in HOLDS_PERMITS and after not in HOLDS_PERMITS,
        finished=after in TERMINAL,
    )


def lease_lost_event(side_effect: SideEffect, attempts_left: bool) -> Event:
    """What a lost lease of a *started* attempt means (SPEC P4): unsafe work is never rerun
    silently; idempotent work retries while attempts remain."""
    if side_effect is SideEffect.UNSAFE:
        return E.OUTCOME_UNKNOWN
    return E.LEASE_LOST_RETRY if attempts_left else E.LEASE_LOST_FINAL


def failure_event(
    retryable: bool,
    attempts_left: bool,
    side_effect: SideEffect = SideEffect.IDEMPOTENT,
    *,
    safe_to_retry: bool = False,
) -> Event:
    """What a reported failure does. A handler of ``unsafe`` work that failed in a way that
    could be retried may have done its side effect before failing (a crash): its outcome is
    unknown, so an operator decides (P4) — unless the handler vouched that nothing happened."""
    if not retryable:
        return E.FAIL_FINAL
    if side_effect is SideEffect.UNSAFE and not safe_to_retry:
        return E.OUTCOME_UNKNOWN
    return E.FAIL_RETRY if attempts_left else E.FAIL_FINAL


def honour_cancel(event: Event, cancel_requested: bool) -> Event:
    """A retry of work someone asked to cancel does not happen: the task ends cancelled."""
    if cancel_requested and event in (E.FAIL_RETRY, E.LEASE_LOST_RETRY):
        return E.CANCEL_SETTLED
    return event
