"""No query spells a state as a literal: states are ``:kind.value`` parameters the query book
binds from the store's list of persisted states, which Pulse's and Weave's enums must match."""

from __future__ import annotations

import re
from enum import StrEnum
from importlib import resources

import pytest

from orbit_server.pulse.schedule_model import BackfillState
from orbit_server.pulse.schedules import Outcome as FireOutcome
from orbit_server.pulse.states import AttemptState, TaskState
from orbit_server.store import states
from orbit_server.store.sql import QueryBook, parse_queries
from orbit_server.weave.engine import StepState, WorkflowState
from orbit_server.weave.states import SignalState

ALL_STATES = frozenset().union(*states.PERSISTED.values())
_LITERAL = re.compile(r"'([^']*)'")


def query_files() -> list[tuple[str, str]]:
    """(folder/file, text) of every query file of every dialect and of ``common/``."""
    root = resources.files("orbit_server.store")
    return [
        (f"{folder}/{entry.name}", entry.read_text("utf-8"))
        for folder in ("common", "mysql", "sqlite")
        for entry in sorted(root.joinpath(folder).iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".sql")
    ]


def test_no_query_spells_a_state_as_a_literal() -> None:
    files = query_files()
    assert files
    found = [
        f"{path} {query.name}: '{literal}'"
        for path, source in files
        for query in parse_queries(source, "sqlite")
        for literal in _LITERAL.findall(query.text)
        if literal in ALL_STATES
    ]
    assert found == [], "bind states as :kind.value parameters (store/states.py)"


def test_no_query_compares_a_state_column_with_a_literal() -> None:
    # Also a value that is no state yet (a new one not listed in store/states.py).
    compared = re.compile(r"\b(state|outcome)\s*(=|<>|!=|IN\s*\()\s*'", re.IGNORECASE)
    found = [
        f"{path} {query.name}"
        for path, source in query_files()
        for query in parse_queries(source, "sqlite")
        if compared.search(query.text)
    ]
    assert found == []


@pytest.mark.parametrize(
    ("enum", "persisted"),
    [
        (TaskState, states.TASK),
        (WorkflowState, states.WORKFLOW),
        (StepState, states.STEP),
        (FireOutcome, states.FIRE),
        (AttemptState, states.ATTEMPT),
        (SignalState, states.SIGNAL),
        (BackfillState, states.BACKFILL),
    ],
)
def test_the_domain_enums_match_the_persisted_states(
    enum: type[StrEnum], persisted: frozenset[str]
) -> None:
    assert {str(member) for member in enum} == persisted


def test_an_attempt_ends_in_a_task_state_or_released() -> None:
    beyond_tasks = states.ATTEMPT - states.TASK
    assert beyond_tasks == {"released"}


def test_a_state_parameter_is_bound_by_the_query_itself() -> None:
    [q] = parse_queries(
        "-- name: lease\nUPDATE tasks SET state = :task.leased\n"
        " WHERE id IN (:ids) AND state IN (:task.pending, :task.scheduled)",
        "sqlite",
    )
    assert q.params == ("task.leased", "ids", "task.pending", "task.scheduled")
    assert q.bind({"ids": ["a", "b"]}) == (
        "UPDATE tasks SET state = ?\n WHERE id IN (?, ?) AND state IN (?, ?)",
        ("leased", "a", "b", "pending", "scheduled"),
    )
    assert q.args({"ids": "a"}) == ("leased", "a", "pending", "scheduled")


@pytest.mark.parametrize(
    ("reference", "message"),
    [("task.finished", "not a task state"), ("job.pending", "no kind of state")],
)
def test_a_state_that_is_not_persisted_fails_at_load(reference: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"query q: .*{message}"):
        parse_queries(f"-- name: q\nSELECT id FROM tasks WHERE state = :{reference}", "sqlite")


@pytest.mark.parametrize("dialect", ["mysql", "sqlite"])
def test_every_shipped_state_parameter_names_a_persisted_state(dialect: str) -> None:
    book = QueryBook.load(dialect)  # type: ignore[arg-type]
    bound = {p for name in book.names() for p in book[name].states}
    assert bound and all(states.state_value(p) for p in bound)
