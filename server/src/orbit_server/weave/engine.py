"""Weave's decisions (SPEC W2–W4, decision 0015): from a step's definition and how its
execution ended, where the instance goes; when a poll runs again; which tasks a step asks
Pulse for. Pure: no store, no clock (``now`` is a parameter).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import msgspec

from orbit_server.pulse.model import Owner, TaskSpec
from orbit_server.pulse.retry import RetryPolicy
from orbit_server.pulse.states import SideEffect
from orbit_server.weave.definition import (
    ChoiceStep,
    Definition,
    PollStep,
    Step,
    TaskFields,
    TimerStep,
)
from orbit_server.weave.expr import ExpressionFailed
from orbit_server.weave.states import ACTIVE, ENDED, FINISHED, StepState, WorkflowState

# The states' home is ``states``; what imported them from here still finds them.
__all__ = [
    "ACTIVE",
    "ENDED",
    "FINISHED",
    "Failure",
    "Goto",
    "Limits",
    "ListEnd",
    "Outcome",
    "PollNext",
    "StepState",
    "TaskInvalid",
    "Transition",
    "WorkflowState",
    "after_round",
    "broken",
    "choose",
    "failed",
    "item_key",
    "mapped_output",
    "round_key",
    "step_key",
    "task_spec",
    "timer_due",
    "transition",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Limits:
    """What one instance may make: the limits of ORBIT_MAX_PARAMS_BYTES and
    ORBIT_WORKFLOW_MAX_STEP_EXECUTIONS."""

    max_params_bytes: int = 1 << 20
    max_step_executions: int = 200_000


def failed(code: str, message: str, **more: Any) -> dict[str, Any]:
    return {"code": code, "message": message, **more}


def broken(exc: ExpressionFailed, **more: Any) -> dict[str, Any]:
    """The error of a step whose expression failed, or whose task Pulse would refuse."""
    return failed(getattr(exc, "code", "expression_failed"), str(exc), **more)


class TaskInvalid(ExpressionFailed):
    """A step's task that Pulse would refuse: params too large, a key too long."""

    code = "task_invalid"


MAX_KEY = {"concurrency_key": 200, "fairness_key": 128}


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"  # a signal wait's timeout
    EXHAUSTED = "exhausted"  # a poll's rounds or time ran out


@dataclass(frozen=True, slots=True)
class Goto:
    step: str


@dataclass(frozen=True, slots=True)
class ListEnd:
    """The step list (the workflow's or a branch's) ends here, successfully."""


@dataclass(frozen=True, slots=True)
class Failure:
    error: dict[str, Any]


Transition = Goto | ListEnd | Failure


def step_key(step_id: str, visit: int) -> str:
    """The key of a step's ``visit``-th execution within its instance."""
    return step_id if visit == 1 else f"{step_id}:{visit}"


def item_key(map_key: str, index: int) -> str:
    return f"{map_key}:i{index}"


def round_key(poll_key: str, round_: int) -> str:
    return f"{poll_key}:r{round_}"


def parse_key(key: str) -> tuple[str, int | None, int | None]:
    """An execution key's step id, poll round and map item (``None`` when it is not one):
    the inverse of ``step_key``, ``item_key`` and ``round_key`` (step ids hold no ``:``)."""
    step, *rest = key.split(":")
    last = rest[-1] if rest else ""
    if last[1:].isdigit() and last[:1] == "r":
        return step, int(last[1:]), None
    if last[1:].isdigit() and last[:1] == "i":
        return step, None, int(last[1:])
    return step, None, None


def transition(step: Step, outcome: Outcome, error: dict[str, Any] | None) -> Transition:
    """Where an execution of ``step`` that ended with ``outcome`` leads (not for choices)."""
    if outcome is Outcome.SUCCEEDED:
        nxt = getattr(step, "next", None)
        return ListEnd() if nxt is None else Goto(nxt)
    handler = {
        Outcome.FAILED: "on_failure",
        Outcome.TIMED_OUT: "on_timeout",
        Outcome.EXHAUSTED: "on_exhausted",
    }[outcome]
    target = getattr(step, handler, None)
    if target is not None:
        return Goto(target)
    return Failure(error or {"code": "step_failed", "message": f"step {step.id} failed"})


def choose(step: ChoiceStep, definition: Definition, data: dict[str, Any]) -> str | None:
    """The first choice whose condition holds, else the default (None: neither).
    Raises ``ExpressionFailed`` when a condition cannot be evaluated."""
    for i, choice in enumerate(step.choices):
        condition = definition.expr(step.id, f"when.{i}")
        assert condition is not None
        if condition.test(data):
            return choice.next
    return step.default


def timer_due(
    step: TimerStep, definition: Definition, data: dict[str, Any], now: datetime
) -> datetime:
    if step.duration_ms is not None:
        return now + timedelta(milliseconds=step.duration_ms)
    until = definition.expr(step.id, "until")
    assert until is not None
    value = until.evaluate(data)
    if not isinstance(value, str):
        raise ExpressionFailed("a timer's until must give an RFC 3339 time")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ExpressionFailed(f"a timer's until gave {value!r}, not an RFC 3339 time") from None
    if moment.tzinfo is None:
        raise ExpressionFailed("a timer's until must give a time with its offset")
    return max(moment, now)


@dataclass(frozen=True, slots=True)
class PollNext:
    """After a round: ``done`` (until held), ``exhausted``, or the next round at ``at``."""

    done: bool = False
    exhausted: bool = False
    at: datetime | None = None


def after_round(
    step: PollStep, *, round_: int, met: bool, started_at: datetime, now: datetime
) -> PollNext:
    if met:
        return PollNext(done=True)
    if round_ >= step.max_rounds:
        return PollNext(exhausted=True)
    at = now + timedelta(milliseconds=step.interval_ms)
    if step.max_duration_ms is not None and at > started_at + timedelta(
        milliseconds=step.max_duration_ms
    ):
        return PollNext(exhausted=True)
    return PollNext(at=at)


def task_spec(
    definition: Definition,
    owner_step: str,
    fields: TaskFields,
    data: dict[str, Any],
    *,
    owner: Owner,
    gate_id: str,
    max_params_bytes: int,
) -> TaskSpec:
    """The Pulse task a step execution asks for; raises ``ExpressionFailed`` when its params
    or keys cannot be evaluated."""

    def text(role: str) -> str | None:
        expression = definition.expr(owner_step, role)
        if expression is None:
            return None
        value = expression.evaluate(data)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise ExpressionFailed(f"{role} must give a string or an integer")
        key = str(value)
        if not key.strip() or len(key) > MAX_KEY[role] or key != key.strip():
            raise TaskInvalid(
                f"{role} must be 1 to {MAX_KEY[role]} characters without surrounding spaces"
            )
        return key

    params_expr = definition.expr(owner_step, "params")
    params = data.get("input") if params_expr is None else params_expr.evaluate(data)
    size = len(msgspec.json.encode(params))
    if size > max_params_bytes:
        raise TaskInvalid(f"params are {size} bytes as JSON; the limit is {max_params_bytes}")
    retry = RetryPolicy()
    if fields.retry is not None:
        r = fields.retry
        retry = RetryPolicy(
            max_attempts=retry.max_attempts if r.max_attempts is None else r.max_attempts,
            initial_backoff_ms=(
                retry.initial_backoff_ms if r.initial_backoff_ms is None else r.initial_backoff_ms
            ),
            backoff_multiplier=(
                retry.backoff_multiplier if r.backoff_multiplier is None else r.backoff_multiplier
            ),
            max_backoff_ms=retry.max_backoff_ms if r.max_backoff_ms is None else r.max_backoff_ms,
        )
    return TaskSpec(
        queue=fields.queue,
        type=fields.type,
        params=params,
        priority=fields.priority,
        retry=retry,
        timeout_ms=fields.timeout_ms,
        concurrency_key=text("concurrency_key"),
        fairness_key=text("fairness_key"),
        side_effect=SideEffect(fields.side_effect),
        handler_version=fields.handler_version,
        labels=dict(fields.labels or {}),
        owner=owner,
        gate_id=gate_id,
    )


def mapped_output(
    definition: Definition, owner_step: str, result: Any, data: dict[str, Any]
) -> Any:
    """A task's result through its step's ``output`` mapping (none: the result itself)."""
    expression = definition.expr(owner_step, "output")
    if expression is None:
        return result
    return expression.evaluate({**data, "result": result})
