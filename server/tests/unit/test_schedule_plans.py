"""What one scheduler pass decides for a schedule (pure): missed slots, each catch-up and
overlap policy, pause, budgets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orbit_server.pulse.fire_times import interval
from orbit_server.pulse.schedules import (
    Catchup,
    Cause,
    Outcome,
    Overlap,
    PassInput,
    Plan,
    backfill_slots,
    plan_pass,
)

T0 = datetime(2030, 1, 1, tzinfo=UTC)
MISFIRE = timedelta(seconds=60)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def plan(
    now_s: float,
    *,
    next_s: float = 1,
    catchup: Catchup = Catchup.LATEST,
    catchup_max: int = 10,
    overlap: Overlap = Overlap.ALLOW,
    running: bool = False,
    paused: bool = False,
    queued_s: float | None = None,
    budget: int = 1000,
    end_s: float | None = None,
) -> Plan:
    return plan_pass(
        PassInput(
            timing=interval(timedelta(seconds=1), T0),
            end_at=None if end_s is None else at(end_s),
            catchup=catchup, catchup_max=catchup_max, overlap=overlap, paused=paused,
            next_fire_at=at(next_s), queued_fire_at=None if queued_s is None else at(queued_s),
            previous_running=running,
        ),
        at(now_s), misfire=MISFIRE, budget=budget,
    )  # fmt: skip


def outcomes(p: Plan) -> list[tuple[float, str, str]]:
    return [((f.fire_time - T0).total_seconds(), str(f.outcome), str(f.cause)) for f in p.fires]


def test_an_on_time_slot_fires_and_the_next_one_is_planned() -> None:
    p = plan(1.2)
    assert outcomes(p) == [(1, "fired", "schedule")]
    assert (p.next_fire_at, p.due_at, p.firing) == (at(2), at(2), [at(1)])


def test_nothing_is_due_before_the_next_slot() -> None:
    p = plan(0.5)
    assert (p.fires, p.next_fire_at, p.due_at) == ([], at(1), at(1))


@pytest.mark.parametrize(
    ("catchup", "fired"),
    [(Catchup.SKIP, []), (Catchup.LATEST, [9]), (Catchup.ALL, [6, 7, 8, 9])],
)
def test_missed_slots_follow_the_catchup_policy(catchup: Catchup, fired: list[int]) -> None:
    p = plan(10.5, catchup=catchup, catchup_max=4)  # slots 1-9 missed, slot 10 on time
    assert [s for s, o, c in outcomes(p) if c == "catchup"] == fired
    assert [s for s, o, _ in outcomes(p) if o == "missed"] == sorted(set(range(1, 10)) - set(fired))
    assert outcomes(p)[-1] == (10, "fired", "schedule")


def test_all_fires_every_missed_slot_when_fewer_than_catchup_max() -> None:
    p = plan(4.5, catchup=Catchup.ALL, catchup_max=10)
    assert outcomes(p) == [
        (1, "fired", "catchup"), (2, "fired", "catchup"), (3, "fired", "catchup"),
        (4, "fired", "schedule"),
    ]  # fmt: skip


def test_a_slot_up_to_a_second_late_is_never_missed() -> None:
    p = plan(2.0, catchup=Catchup.SKIP)  # slot 1 exactly 1 s late, slot 2 due now
    assert outcomes(p) == [(1, "fired", "schedule"), (2, "fired", "schedule")]


def test_a_lone_slot_is_missed_only_beyond_the_misfire_limit() -> None:
    hourly = interval(timedelta(hours=1), T0)

    def lone(late_s: float) -> list[str]:
        inp = PassInput(hourly, None, Catchup.SKIP, 10, Overlap.ALLOW, False, at(3600), None,
                        False)  # fmt: skip
        return [str(f.outcome) for f in plan_pass(inp, at(3600 + late_s), misfire=MISFIRE,
                                                   budget=10).fires]  # fmt: skip

    assert lone(59) == ["fired"]
    assert lone(61) == ["missed"]


def test_overlap_skip_and_queue_one_against_a_running_previous_task() -> None:
    assert outcomes(plan(1.1, overlap=Overlap.SKIP, running=True)) == [(1, "skipped", "schedule")]
    p = plan(2.1, overlap=Overlap.QUEUE_ONE, running=True, next_s=2)
    assert outcomes(p) == [(2, "queued", "schedule")]
    assert (p.queued_fire_at, p.due_at) == (at(2), at(3))  # looked at again within a second
    p = plan(3.1, overlap=Overlap.QUEUE_ONE, running=True, next_s=3, queued_s=2)
    assert outcomes(p) == [(3, "skipped", "schedule")] and p.queued_fire_at == at(2)


def test_a_queued_slot_fires_once_the_previous_task_settled() -> None:
    p = plan(3.1, overlap=Overlap.QUEUE_ONE, running=False, next_s=3, queued_s=2)
    assert p.fire_queued == at(2)
    assert outcomes(p) == [(3, "queued", "schedule")]  # behind the queued slot just fired
    assert p.firing == [at(2)]


def test_overlap_applies_to_the_slots_of_one_pass_in_order() -> None:
    p = plan(3.5, catchup=Catchup.ALL, overlap=Overlap.SKIP)
    assert [o for _, o, _ in outcomes(p)] == ["fired", "skipped", "skipped"]


def test_a_paused_schedule_records_its_slots_as_paused_and_keeps_its_queued_slot() -> None:
    p = plan(3.5, paused=True, overlap=Overlap.QUEUE_ONE, queued_s=0)
    assert outcomes(p) == [(1, "paused", "schedule"), (2, "paused", "schedule"),
                           (3, "paused", "schedule")]  # fmt: skip
    assert p.fire_queued is None and p.queued_fire_at == at(0)


def test_the_budget_bounds_a_pass_and_the_rest_is_due_at_once() -> None:
    p = plan(100.5, budget=10, catchup=Catchup.LATEST)
    assert [o for _, o, _ in outcomes(p)] == ["missed"] * 10  # the newest are in a later pass
    assert (p.next_fire_at, p.due_at) == (at(11), at(100.5))


def test_the_end_bound_stops_the_schedule() -> None:
    p = plan(10, end_s=3, catchup=Catchup.SKIP)
    assert [s for s, _, _ in outcomes(p)] == [1, 2, 3]
    assert (p.next_fire_at, p.due_at) == (None, None)


def test_backfill_slots_are_half_open_and_resume_after_the_cursor() -> None:
    timing = interval(timedelta(seconds=1), T0)
    assert backfill_slots(timing, at(1), at(4), None, budget=10) == [at(1), at(2), at(3)]
    assert backfill_slots(timing, at(1), at(4), at(2), budget=10) == [at(3)]
    assert backfill_slots(timing, at(1), at(100), None, budget=2) == [at(1), at(2)]


def test_causes_and_outcomes_have_their_wire_names() -> None:
    assert [str(c) for c in Cause] == ["schedule", "catchup", "trigger", "backfill"]
    assert [str(o) for o in Outcome] == ["fired", "skipped", "missed", "paused", "queued"]
