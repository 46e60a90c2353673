"""What the planner reads and what it answers (decision 0020): the events that move an
instance, the view of the instance they are planned against, the reads a plan may still
need, and the plan itself. Plain data: no store, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from orbit_server.pulse.model import Task, TaskSpec
from orbit_server.weave.model import Signal, StepExecution, Workflow

# -- events: what happened to an instance ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start:
    """A new instance begins at its first step."""

    input: Any


@dataclass(frozen=True, slots=True)
class TaskEnded:
    """The result event of a step's task (boundary 2): ``state`` as the event recorded it,
    ``task`` as it is now."""

    task: Task
    state: str


@dataclass(frozen=True, slots=True)
class Due:
    """A wait's time came (a timer, a signal's timeout, a poll's interval, a deferred entry,
    a map's refill)."""

    key: str


@dataclass(frozen=True, slots=True)
class SignalSent:
    """A signal for the instance (kept pending when no execution waits for it)."""

    signal: Signal


@dataclass(frozen=True, slots=True)
class Pause:
    pass


@dataclass(frozen=True, slots=True)
class Resume:
    pass


@dataclass(frozen=True, slots=True)
class Cancel:
    reason: str | None


@dataclass(frozen=True, slots=True)
class RetryStep:
    key: str


@dataclass(frozen=True, slots=True)
class SkipStep:
    key: str
    output: Any


@dataclass(frozen=True, slots=True)
class ResolveStep:
    key: str
    succeeded: bool
    output: Any
    error: dict[str, Any] | None


Event = (
    Start | TaskEnded | Due | SignalSent | Pause | Resume | Cancel | RetryStep | SkipStep
    | ResolveStep
)  # fmt: skip

# -- needs: reads the view lacked ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rows:
    """Step executions by key (absent ones are known absent once read)."""

    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Active:
    """Every active execution of the instance."""


@dataclass(frozen=True, slots=True)
class Items:
    """A map's items, as evaluated when it began."""

    key: str


@dataclass(frozen=True, slots=True)
class Outputs:
    """A map's item outputs, in item order."""

    key: str


@dataclass(frozen=True, slots=True)
class OldestSignal:
    """The oldest pending signal of a name."""

    name: str


@dataclass(frozen=True, slots=True)
class SignalByKey:
    key: str


@dataclass(frozen=True, slots=True)
class Unfollowed:
    """Ended executions not followed yet (recorded while paused)."""


@dataclass(frozen=True, slots=True)
class Reviewing:
    """How many executions are in needs_review."""


Need = Rows | Active | Items | Outputs | OldestSignal | SignalByKey | Unfollowed | Reviewing


class Missing(Exception):
    """Raised inside the planner when the view lacks ``need``: the plan is made again once
    it is read (the planner is pure, so the second plan is the first one, completed)."""

    def __init__(self, need: Need) -> None:
        super().__init__(need)
        self.need = need


@dataclass(slots=True)
class View:
    """What is known of one locked instance. Every read is made under its lock, before any of
    its writes; ``rows`` holds None for a key known to be absent."""

    workflow: Workflow
    rows: dict[str, StepExecution | None] = field(default_factory=dict)
    active: list[StepExecution] | None = None
    items: dict[str, list[Any]] = field(default_factory=dict)
    outputs: dict[str, list[Any]] = field(default_factory=dict)
    signals: dict[str, Signal | None] = field(default_factory=dict)
    signal_keys: dict[str, Signal | None] = field(default_factory=dict)
    unfollowed: list[StepExecution] | None = None
    reviewing: int | None = None
    room: dict[str, int] | None = None  # free places by queue: new tasks that do not fit wait
    new_instance: bool = False  # its row is inserted with the plan (a start)


# -- the plan: what to write ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskOrder:
    """A task to create for a step execution; its rows name it by ``placeholder`` until the
    apply gives it its id."""

    key: str
    placeholder: str
    spec: TaskSpec


@dataclass(frozen=True, slots=True)
class Resolution:
    """An operator's decision on a step task in needs_review (its result event moves on)."""

    task_id: str
    succeeded: bool
    output: Any
    error: dict[str, Any] | None


@dataclass(slots=True)
class Plan:
    """The writes of one instance's advancement, or (``needs``) the reads it lacks."""

    workflow: Workflow  # as it is to be (written when ``changed``)
    was_finished: bool
    changed: bool = False
    new_instance: bool = False
    new_rows: list[StepExecution] = field(default_factory=list)
    changed_rows: list[StepExecution] = field(default_factory=list)
    items: dict[str, list[Any]] = field(default_factory=dict)  # a map's items, by its key
    set_items: list[str] = field(default_factory=list)  # of those, maps whose row exists
    tasks: list[TaskOrder] = field(default_factory=list)
    cancels: list[tuple[str, str]] = field(default_factory=list)  # (task id, reason)
    signals: list[Signal] = field(default_factory=list)  # new ones
    deliveries: list[tuple[str, str]] = field(default_factory=list)  # (signal id, step key)
    gate_open: bool | None = None
    rearm: bool = False  # parked waits get their wake time again (resume)
    resolution: Resolution | None = None
    audit: bool = False  # an operator's call that changed no row of its own is audited too
    answer: Any = None  # what the use case answers (a signal)
    needs: list[Need] = field(default_factory=list)
    now: datetime | None = None
