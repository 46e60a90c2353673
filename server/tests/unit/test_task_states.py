"""The task state machine and the retry policy (pure)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from orbit_server.pulse.retry import RetryPolicy
from orbit_server.pulse.states import (
    INITIAL,
    TERMINAL,
    TRANSITIONS,
    Event,
    IllegalTransition,
    SideEffect,
    TaskState,
    decide,
    failure_event,
    lease_lost_event,
)

DOC = Path(__file__).resolve().parents[3] / "docs" / "explanation" / "states.md"


def test_the_diagram_lists_exactly_the_transition_table() -> None:
    arrows = set(
        re.findall(r"^\s+(\[\*\]|\w+) --> (\w+|\[\*\])(?: : (\w+))?$", DOC.read_text(), re.M)
    )
    drawn = {(a, ev, b) for a, b, ev in arrows if a != "[*]" and b != "[*]"}
    table = {(a.value, ev.value, b.value) for (a, ev), b in TRANSITIONS.items()}
    assert drawn == table
    starts = {(ev, b) for a, b, ev in arrows if a == "[*]"}
    assert starts == {(ev.value, st.value) for ev, st in INITIAL.items()}
    ends = {a for a, b, _ in arrows if b == "[*]"}
    assert ends == {s.value for s in TERMINAL}


def test_every_state_is_reachable_and_no_terminal_state_leaks() -> None:
    reached = set(INITIAL.values()) | set(TRANSITIONS.values())
    assert reached == set(TaskState)
    for (state, event), _ in TRANSITIONS.items():
        if state in TERMINAL:
            assert event is Event.OPERATOR_RETRY  # only an operator reopens finished work


def test_permits_are_taken_by_the_claim_and_given_back_on_every_exit() -> None:
    for (state, event), after in TRANSITIONS.items():
        decision = decide(state, event)
        assert decision.after is after
        holds_before = state in (TaskState.LEASED, TaskState.RUNNING)
        holds_after = after in (TaskState.LEASED, TaskState.RUNNING)
        assert decision.releases_permits == (holds_before and not holds_after)
        assert decision.takes_permits == (holds_after and not holds_before)
    assert decide(TaskState.PENDING, Event.CLAIM).takes_permits


def test_result_events_on_terminal_states_and_needs_review() -> None:
    assert decide(TaskState.RUNNING, Event.COMPLETE).emits_event
    assert decide(TaskState.RUNNING, Event.OUTCOME_UNKNOWN).emits_event
    assert not decide(TaskState.RUNNING, Event.FAIL_RETRY).emits_event
    assert decide(TaskState.PENDING, Event.CANCEL).finished


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (TaskState.SUCCEEDED, Event.COMPLETE),
        (TaskState.RUNNING, Event.CLAIM),
        (TaskState.PENDING, Event.START),
        (TaskState.SUCCEEDED, Event.OPERATOR_RETRY),
        (TaskState.RUNNING, Event.CANCEL),  # running work is asked, not forced
    ],
)
def test_other_transitions_are_refused(state: TaskState, event: Event) -> None:
    with pytest.raises(IllegalTransition):
        decide(state, event)


def test_unsafe_work_is_never_rerun_silently() -> None:
    assert lease_lost_event(SideEffect.UNSAFE, attempts_left=True) is Event.OUTCOME_UNKNOWN
    assert lease_lost_event(SideEffect.IDEMPOTENT, attempts_left=True) is Event.LEASE_LOST_RETRY
    assert lease_lost_event(SideEffect.IDEMPOTENT, attempts_left=False) is Event.LEASE_LOST_FINAL
    assert failure_event(retryable=False, attempts_left=True) is Event.FAIL_FINAL
    assert failure_event(retryable=True, attempts_left=True) is Event.FAIL_RETRY
    unsafe = SideEffect.UNSAFE
    # A retryable failure of unsafe work may have done its side effect: an operator decides.
    assert failure_event(True, True, unsafe) is Event.OUTCOME_UNKNOWN
    assert failure_event(True, True, unsafe, safe_to_retry=True) is Event.FAIL_RETRY
    assert failure_event(False, True, unsafe) is Event.FAIL_FINAL


def test_backoff_grows_is_capped_and_jittered() -> None:
    policy = RetryPolicy(
        max_attempts=10, initial_backoff_ms=100, backoff_multiplier=2, max_backoff_ms=1000
    )
    assert [policy.ceiling_ms(n) for n in (1, 2, 3, 4, 5, 9, 10_000)] == [
        100,
        200,
        400,
        800,
        1000,
        1000,
        1000,
    ]
    rng = random.Random(7)
    draws = [policy.backoff_ms(3, rng) for _ in range(200)]
    assert min(draws) >= 200 and max(draws) <= 400 and len(set(draws)) > 50
    assert policy.attempts_left(9) and not policy.attempts_left(10)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"initial_backoff_ms": -1},
        {"backoff_multiplier": 0.5},
        {"initial_backoff_ms": 10, "max_backoff_ms": 5},
    ],
)
def test_invalid_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="retry"):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
