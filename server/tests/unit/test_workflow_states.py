"""Weave's state machines (pure): the tables, their diagrams, what they refuse."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orbit_server.weave.states import (
    ACTIVE,
    FINISHED,
    STEP_FINISHED,
    STEP_INITIAL,
    STEP_TRANSITIONS,
    WORKFLOW_INITIAL,
    WORKFLOW_TRANSITIONS,
    IllegalTransition,
    StepEvent,
    StepState,
    WorkflowEvent,
    WorkflowState,
    review_settled,
    step_after,
    workflow_after,
)

DOC = Path(__file__).resolve().parents[3] / "docs" / "explanation" / "workflow-states.md"
ARROW = re.compile(r"^\s+(\[\*\]|\w+) --> (\w+|\[\*\])(?: : (\w+))?$", re.M)


def _diagram(title: str) -> set[tuple[str, str, str]]:
    section = DOC.read_text().split(f"## {title}\n", 1)[1].split("```", 2)[1]
    return {(a, ev, b) for a, b, ev in ARROW.findall(section)}


@pytest.mark.parametrize(
    ("title", "table", "initial", "finished"),
    [
        ("An instance", WORKFLOW_TRANSITIONS, WORKFLOW_INITIAL, FINISHED),
        ("A step execution", STEP_TRANSITIONS, STEP_INITIAL, STEP_FINISHED),
    ],
)
def test_each_diagram_lists_exactly_its_transition_table(
    title: str, table: dict[tuple[str, str], str], initial: dict[str, str], finished: frozenset[str]
) -> None:
    arrows = _diagram(title)
    drawn = {(a, ev, b) for a, ev, b in arrows if "[*]" not in (a, b)}
    assert drawn == {(str(a), str(ev), str(b)) for (a, ev), b in table.items()}
    assert {(ev, b) for a, ev, b in arrows if a == "[*]"} == {
        (str(ev), str(st)) for ev, st in initial.items()
    }
    assert {a for a, _, b in arrows if b == "[*]"} == {str(s) for s in finished}


def test_every_state_is_reachable_and_only_an_operator_leaves_a_finished_one() -> None:
    assert set(WORKFLOW_INITIAL.values()) | set(WORKFLOW_TRANSITIONS.values()) == set(WorkflowState)
    assert set(STEP_INITIAL.values()) | set(STEP_TRANSITIONS.values()) == set(StepState)
    for state, event in WORKFLOW_TRANSITIONS:
        if state in FINISHED:
            assert event is WorkflowEvent.REOPEN and state is WorkflowState.FAILED
    for step_state, step_event in STEP_TRANSITIONS:
        if step_state in STEP_FINISHED:
            assert step_event in (StepEvent.SKIP, StepEvent.RETRY)
            assert step_state is StepState.FAILED


def test_every_active_execution_can_be_cancelled_and_skipped() -> None:
    for state in ACTIVE:
        assert step_after(state, StepEvent.CANCEL) is StepState.CANCELLED
        assert step_after(state, StepEvent.SKIP) is StepState.SKIPPED


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (StepState.SUCCEEDED, StepEvent.SUCCEED),
        (StepState.CANCELLED, StepEvent.SKIP),
        (StepState.WAITING, StepEvent.REVIEW),
        (StepState.SKIPPED, StepEvent.RETRY),
    ],
)
def test_other_step_transitions_are_refused(state: StepState, event: StepEvent) -> None:
    with pytest.raises(IllegalTransition):
        step_after(state, event)


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (WorkflowState.SUCCEEDED, WorkflowEvent.REOPEN),
        (WorkflowState.CANCELLED, WorkflowEvent.CANCEL),
        (WorkflowState.PAUSED, WorkflowEvent.PAUSE),
        (WorkflowState.PAUSED, WorkflowEvent.SUCCEED),  # a paused instance follows nothing
    ],
)
def test_other_instance_transitions_are_refused(state: WorkflowState, event: WorkflowEvent) -> None:
    with pytest.raises(IllegalTransition):
        workflow_after(state, event)


def test_review_is_settled_from_the_steps_in_review() -> None:
    assert review_settled("running", True) is WorkflowState.NEEDS_REVIEW
    assert review_settled("needs_review", False) is WorkflowState.RUNNING
    assert review_settled("needs_review", True) is WorkflowState.NEEDS_REVIEW
    assert review_settled("paused", True) is WorkflowState.PAUSED
