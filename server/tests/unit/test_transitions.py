"""Transitions as values: every effect a change of state writes is derived from the pair of
states, once, and the table refuses what it does not allow."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from orbit_server.pulse.states import TRANSITIONS, Event, IllegalTransition, TaskState
from orbit_server.pulse.transitions import RowWrite, transition
from orbit_server.scope import Scope

S, E = TaskState, Event
ACME = Scope("acme", "prod")


@dataclass(frozen=True)
class Row:
    state: str
    concurrency_key: str | None = None
    id: str = "tsk_1"
    scope: Scope = ACME
    queue: str = "emails"
    lease_epoch: int = 2
    gate_id: str | None = None
    owner_kind: str | None = None
    owner_id: str | None = None
    event_seq: int = 0


def test_a_success_ends_the_attempt_gives_permits_back_and_emits_a_result() -> None:
    t = transition(Row("running"), E.COMPLETE, result={"ok": 1}, error={"ignored": True})
    assert (t.before, t.after, t.write) == (S.RUNNING, S.SUCCEEDED, RowWrite.FINISH)
    assert t.attempt is not None and (t.attempt.state, t.attempt.cause) == (
        "succeeded",
        "completed",
    )
    assert t.releases_permits and t.emits_result and t.finished and t.plain_success
    assert not t.claimable and t.waiting_delta == 0
    assert (t.result, t.error) == ({"ok": 1}, None)


def test_an_eager_attempts_success_passes_through_running() -> None:
    t = transition(Row("leased"), E.COMPLETE)
    assert t.starts_attempt and t.plain_success and t.after is S.SUCCEEDED


def test_a_retry_waits_scheduled_and_its_attempt_ends_failed() -> None:
    t = transition(Row("running"), E.FAIL_RETRY, error={"code": "x"})
    assert t.after is S.SCHEDULED and not t.finished and not t.emits_result
    assert t.attempt is not None and (t.attempt.state, t.attempt.cause) == ("failed", "error")
    assert t.releases_permits and not t.claimable and not t.plain_success


def test_unstarted_work_returns_without_using_an_attempt() -> None:
    t = transition(Row("leased"), E.LEASE_EXPIRED_UNSTARTED, cause="lease_expired")
    assert (t.after, t.write) == (S.PENDING, RowWrite.RETURN)
    assert t.attempt is not None and (t.attempt.state, t.attempt.cause) == (
        "released",
        "lease_expired",
    )
    assert t.releases_permits and t.claimable and not t.emits_result


@pytest.mark.parametrize(
    ("state", "leaves_range", "releases", "waiting_delta", "attempt"),
    [
        ("scheduled", False, False, -1, None),
        ("pending", True, False, -1, None),
        ("leased", False, True, 0, "cancelled"),
    ],
)
def test_a_cancel_of_unstarted_work_gives_back_what_its_state_held(
    state: str, leaves_range: bool, releases: bool, waiting_delta: int, attempt: str | None
) -> None:
    t = transition(Row(state), E.CANCEL, reason="not needed")
    assert (t.after, t.write, t.reason) == (S.CANCELLED, RowWrite.END_UNSTARTED, "not needed")
    assert (t.leaves_range, t.releases_permits, t.waiting_delta) == (
        leaves_range,
        releases,
        waiting_delta,
    )
    assert (t.attempt.state if t.attempt else None) == attempt
    assert t.emits_result and t.finished


@pytest.mark.parametrize("state", ["failed", "cancelled", "needs_review"])
def test_an_operator_retry_makes_the_task_wait_again(state: str) -> None:
    t = transition(Row(state), E.OPERATOR_RETRY)
    assert (t.after, t.write, t.waiting_delta) == (S.PENDING, RowWrite.REOPEN, 1)
    assert t.claimable and not t.releases_permits and t.attempt is None


def test_a_resolution_keeps_only_what_its_outcome_needs() -> None:
    ok = transition(Row("needs_review"), E.RESOLVE_SUCCEEDED, result=1, error={"e": 1})
    bad = transition(Row("needs_review"), E.RESOLVE_FAILED, result=1, error={"e": 1})
    assert (ok.write, ok.result, ok.error) == (RowWrite.RESOLVE, 1, None)
    assert (bad.write, bad.result, bad.error) == (RowWrite.RESOLVE, None, {"e": 1})
    assert ok.emits_result and bad.emits_result


def test_moves_the_table_does_not_allow_are_refused() -> None:
    with pytest.raises(IllegalTransition):
        transition(Row("succeeded"), E.CANCEL)
    with pytest.raises(IllegalTransition):
        transition(Row("pending"), E.COMPLETE)


def test_every_move_of_the_table_but_claims_starts_and_promotions_is_a_transition() -> None:
    moved_elsewhere = {E.CLAIM, E.START, E.DUE}
    for (state, event), after in TRANSITIONS.items():
        if event in moved_elsewhere:
            continue
        t = transition(Row(str(state)), event)
        assert (t.before, t.after) == (state, after)
