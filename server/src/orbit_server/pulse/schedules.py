"""What a schedule is and what one scheduler pass decides for it (SPEC P9). Pure: the service
reads the schedule and the state of its previous task, asks :func:`plan_pass`, and writes the
plan — ledger rows, tasks and the schedule's new position — in one transaction.

A *slot* is one planned fire time. Every slot a pass looks at gets exactly one ledger entry
with its outcome; the ledger's key (schedule, fire time) is what makes a slot fire at most
once across nodes and restarts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from orbit_server.pulse.fire_times import (
    Interval,
    Timing,
    check_instant,
    cron,
    fire_times,
    interval,
    just_after,
    just_before,
    next_fire,
)
from orbit_server.pulse.model import Owner, TaskSpec
from orbit_server.pulse.retry import RetryPolicy
from orbit_server.pulse.states import SideEffect

MAX_CATCHUP = 1000
# A slot is never missed while it is at most this late, whatever the catch-up policy: a pass
# that starts a little after a slot is a normal pass, not an outage.
MISS_FLOOR = timedelta(seconds=1)
# How soon a schedule with a queued slot (overlap ``queue_one``) looks again at its previous
# task.
QUEUED_RECHECK = timedelta(seconds=1)


class Catchup(StrEnum):
    SKIP = "skip"
    LATEST = "latest"
    ALL = "all"


class Overlap(StrEnum):
    SKIP = "skip"
    ALLOW = "allow"
    QUEUE_ONE = "queue_one"


class Outcome(StrEnum):
    FIRED = "fired"
    SKIPPED = "skipped"  # by the overlap policy
    MISSED = "missed"  # by the catch-up policy
    PAUSED = "paused"
    QUEUED = "queued"  # overlap queue_one: fires once the previous task has settled


class Cause(StrEnum):
    SCHEDULE = "schedule"
    CATCHUP = "catchup"
    TRIGGER = "trigger"
    BACKFILL = "backfill"


@dataclass(frozen=True, slots=True)
class TimingSpec:
    """Exactly one of ``cron`` (with ``timezone``) and ``interval_ms``."""

    cron: str | None
    timezone: str
    interval_ms: int | None

    def compile(self, start_at: datetime | None, created_at: datetime) -> Timing:
        """The fire-time timing; raises ``InvalidTiming`` with a reason. Intervals count from
        ``start_at``, else from the schedule's creation (to the millisecond): schedules made
        at different times fire at different times, and the first fire of a new schedule
        comes one interval after it was made."""
        if (self.cron is None) == (self.interval_ms is None):
            raise ValueError("give exactly one of cron and interval_ms")
        if self.cron is not None:
            return cron(self.cron, self.timezone)
        assert self.interval_ms is not None
        anchor = start_at or created_at.replace(microsecond=created_at.microsecond // 1000 * 1000)
        return interval(timedelta(milliseconds=self.interval_ms), anchor)


def first_slot(
    timing: Timing, now: datetime, start_at: datetime | None, end_at: datetime | None
) -> datetime | None:
    """The first slot after ``now`` (or at ``start_at``, if later) within the bounds."""
    after = now
    if start_at is not None and start_at > now:
        after = just_before(start_at)
    return next_fire(timing, after, until=end_at)


def preview(
    timing: Timing, now: datetime, start_at: datetime | None, end_at: datetime | None, count: int
) -> list[datetime]:
    first = first_slot(timing, now, start_at, end_at)
    if first is None:
        return []
    return [first, *fire_times(timing, first, until=end_at, limit=count - 1)]


@dataclass(frozen=True, slots=True)
class PassInput:
    """What a pass needs to know of one schedule."""

    timing: Timing
    end_at: datetime | None
    catchup: Catchup
    catchup_max: int
    overlap: Overlap
    paused: bool
    next_fire_at: datetime | None
    queued_fire_at: datetime | None
    previous_running: bool  # the task of the schedule's latest fire has not settled


@dataclass(frozen=True, slots=True)
class Fire:
    fire_time: datetime
    outcome: Outcome
    cause: Cause


@dataclass(slots=True)
class Plan:
    fires: list[Fire] = field(default_factory=list)  # new ledger entries, in time order
    fire_queued: datetime | None = None  # the queued slot fires now (its entry becomes fired)
    next_fire_at: datetime | None = None
    queued_fire_at: datetime | None = None
    due_at: datetime | None = None  # when a pass must look at the schedule again

    @property
    def firing(self) -> list[datetime]:
        """The slots that get a task, in time order (a fired queued slot first)."""
        new = [f.fire_time for f in self.fires if f.outcome == Outcome.FIRED]
        return [self.fire_queued, *new] if self.fire_queued is not None else new


def plan_pass(s: PassInput, now: datetime, *, misfire: timedelta, budget: int) -> Plan:
    """Decide every due slot of a schedule, at most ``budget`` of them (the rest next pass).

    A due slot is *missed* when it is more than ``MISS_FLOOR`` late and either the next slot
    is due as well or it is more than ``misfire`` late. The catch-up policy picks which missed
    slots still fire (``skip`` none, ``latest`` the newest, ``all`` the newest
    ``catchup_max``), the rest are recorded missed; slots that are not missed fire. Every
    slot that would fire then passes the overlap policy in time order, against the previous
    fire's task and the ones fired before it in the pass. While paused, due slots are
    recorded paused and a queued slot waits.
    """
    due: list[datetime] = []
    if s.next_fire_at is not None and s.next_fire_at <= now:
        due = [s.next_fire_at]
        due += fire_times(s.timing, s.next_fire_at, until=min_time(now, s.end_at), limit=budget - 1)
    following = next_fire(s.timing, due[-1], until=s.end_at) if due else s.next_fire_at
    more_due = following is not None and following <= now  # beyond the budget: next pass
    plan = Plan(next_fire_at=following, queued_fire_at=s.queued_fire_at)
    if s.paused:
        plan.fires = [Fire(t, Outcome.PAUSED, Cause.SCHEDULE) for t in due]
        plan.due_at = now if more_due else plan.next_fire_at
        return plan

    running = s.previous_running
    if plan.queued_fire_at is not None and not running:
        plan.fire_queued, plan.queued_fire_at = plan.queued_fire_at, None
        running = True

    last = len(due) - 1
    missed = [
        i
        for i, t in enumerate(due)
        if now - t > MISS_FLOOR and (i < last or more_due or now - t > misfire)
    ]
    caught_up: set[int] = set()
    if not more_due:  # the newest missed slots are in this pass
        keep = {Catchup.SKIP: 0, Catchup.LATEST: 1, Catchup.ALL: s.catchup_max}[s.catchup]
        caught_up = set(missed[-keep:]) if keep else set()
    missed_set = set(missed)
    for i, t in enumerate(due):
        if i in missed_set and i not in caught_up:
            plan.fires.append(Fire(t, Outcome.MISSED, Cause.SCHEDULE))
            continue
        cause = Cause.CATCHUP if i in caught_up else Cause.SCHEDULE
        if s.overlap == Overlap.ALLOW or not running:
            plan.fires.append(Fire(t, Outcome.FIRED, cause))
            running = True
        elif s.overlap == Overlap.QUEUE_ONE and plan.queued_fire_at is None:
            plan.fires.append(Fire(t, Outcome.QUEUED, cause))
            plan.queued_fire_at = t
        else:
            plan.fires.append(Fire(t, Outcome.SKIPPED, cause))

    recheck = now + QUEUED_RECHECK
    plan.due_at = now if more_due else due_at(plan.next_fire_at, plan.queued_fire_at, recheck)
    return plan


def due_at(
    next_fire_at: datetime | None, queued_fire_at: datetime | None, look_again: datetime
) -> datetime | None:
    """When a pass must look at a schedule: at its next slot, or at ``look_again`` if that is
    sooner while a slot is queued (waiting for the previous task to settle)."""
    if queued_fire_at is None:
        return next_fire_at
    return min_time(look_again, next_fire_at)


def backfill_slots(
    timing: Timing, start: datetime, end: datetime, cursor: datetime | None, *, budget: int
) -> list[datetime]:
    """The next slots of a backfill of ``[start, end)`` after ``cursor`` (the last slot it
    handled), at most ``budget``."""
    after = cursor if cursor is not None else just_before(start)
    return fire_times(timing, after, until=just_before(end), limit=budget)


def backfill_range(
    start: datetime,
    end: datetime,
    *,
    start_at: datetime | None,
    end_at: datetime | None,
    next_fire_at: datetime | None,
) -> tuple[datetime, datetime]:
    """The part of a backfill's ``[start, end)`` it fires: within the schedule's bounds and
    before its next slot (from there on the due passes decide)."""
    first = max_time(start, start_at)
    last = min_time(end, next_fire_at)
    if end_at is not None:
        last = min_time(last, just_after(end_at))
    return first, last


def backfill_count(
    timing: Timing, start: datetime, end: datetime, *, limit: int
) -> tuple[int, bool]:
    """How many slots ``[start, end)`` holds, and whether that is the exact count: an
    interval's is computed whatever its size; a cron timing's slots are walked up to
    ``limit + 1`` (about 0.1 s for 10,000), and past ``limit`` the answer is ``limit + 1``,
    not exact — "more than ``limit``" (a cron's pace is not even: an estimate from its first
    slots was wrong both ways by orders of magnitude)."""
    if end <= start:
        return 0, True
    if isinstance(timing, Interval):
        return _interval_count(timing, start, end), True
    counted = backfill_slots(timing, start, end, None, budget=limit + 1)
    return len(counted), len(counted) <= limit


def _interval_count(timing: Interval, start: datetime, end: datetime) -> int:
    """Fire times ``anchor + k * every`` (k >= 0) in ``[start, end)``."""
    every = timing.every
    first = 0 if start <= timing.anchor else -((timing.anchor - start) // every)
    if end <= timing.anchor:
        return 0
    after_last = -((timing.anchor - end) // every)  # the first k whose slot is at or after end
    return max(0, after_last - first)


def min_time(a: datetime, b: datetime | None) -> datetime:
    return a if b is None or a <= b else b


@dataclass(frozen=True, slots=True)
class Definition:
    """What a schedule is asked to do; the API validated the task template's fields."""

    timing: TimingSpec
    task: dict[str, Any]
    catchup: Catchup = Catchup.LATEST
    catchup_max: int = 10
    overlap: Overlap = Overlap.SKIP
    start_at: datetime | None = None
    end_at: datetime | None = None

    def check(self, created_at: datetime) -> Timing:
        """The compiled timing of a schedule made at ``created_at``; raises
        ``InvalidTiming`` or ``ValueError`` with a reason."""
        if not 1 <= self.catchup_max <= MAX_CATCHUP:
            raise ValueError(f"catchup_max must be between 1 and {MAX_CATCHUP}")
        if self.start_at is not None and self.end_at is not None and self.end_at <= self.start_at:
            raise ValueError("end_at must be after start_at")
        return self.timing.compile(self.start_at, created_at)

    def check_times(self) -> None:
        """Raises ``InvalidTiming`` for a ``start_at`` or ``end_at`` outside the range of fire
        times. Checked when a definition is given, not when a stored one is read: the fire
        times of one stored before the check are computed all the same."""
        for name, moment in (("start_at", self.start_at), ("end_at", self.end_at)):
            if moment is not None:
                check_instant(name, moment)


def task_spec(template: dict[str, Any], owner: Owner) -> TaskSpec:
    """The task one fire of a schedule submits, from its template."""
    retry = template.get("retry")
    return TaskSpec(
        queue=template["queue"],
        type=template["type"],
        params=template.get("params", {}),
        priority=template.get("priority", 0),
        retry=RetryPolicy() if retry is None else RetryPolicy(**retry),
        timeout_ms=template.get("timeout_ms"),
        concurrency_key=template.get("concurrency_key"),
        fairness_key=template.get("fairness_key"),
        side_effect=SideEffect(template.get("side_effect", "idempotent")),
        handler_version=template.get("handler_version"),
        labels=dict(template.get("labels") or {}),
        owner=owner,
    )


def max_time(a: datetime, b: datetime | None) -> datetime:
    return a if b is None or a >= b else b
