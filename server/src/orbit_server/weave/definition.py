"""Workflow definitions (SPEC W1, decision 0015): the JSON format as types, and the checks a
definition passes before it is stored. Pure.

:func:`parse` decodes and checks a body and answers a :class:`Definition`: the steps by id,
the list each belongs to, and every expression compiled for the variables it sees.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from orbit_server.pulse.retry import RetryPolicy
from orbit_server.weave.expr import Expression, ExpressionInvalid, compile_expression

FORMAT = 1
MAX_STEPS = 500
MAX_CHOICES = 100
MAX_BRANCHES = 50
MAX_DEPTH = 5
MAX_MAP_CONCURRENCY = 1000
MAX_POLL_ROUNDS = 10_000
POLL_INTERVAL_MS = 1000  # a poll's interval when its definition gives none
DAY_MS = 86_400_000

StepId = Annotated[str, Meta(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")]
Name = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")]
Version = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")]
Source = Annotated[str, Meta(min_length=1, max_length=4096)]
Millis = Annotated[int, Meta(ge=1, le=365 * DAY_MS)]


class RetrySpec(Struct, forbid_unknown_fields=True, omit_defaults=True):
    max_attempts: Annotated[int, Meta(ge=1, le=1000)] | None = None
    initial_backoff_ms: Annotated[int, Meta(ge=0, le=DAY_MS)] | None = None
    backoff_multiplier: Annotated[float, Meta(ge=1.0, le=100.0)] | None = None
    max_backoff_ms: Annotated[int, Meta(ge=0, le=DAY_MS)] | None = None


class TaskFields(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """What a step's Pulse task is made of; ``params`` and the keys are expressions."""

    queue: Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[^\s]+$")]
    type: Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[^\s]+$")]
    params: Source | None = None
    output: Source | None = None
    retry: RetrySpec | None = None
    timeout_ms: Annotated[int, Meta(ge=1000, le=365 * DAY_MS)] | None = None
    priority: Annotated[int, Meta(ge=-1_000_000, le=1_000_000)] = 0
    side_effect: Literal["idempotent", "unsafe"] = "idempotent"
    concurrency_key: Source | None = None
    fairness_key: Source | None = None
    labels: (
        Annotated[
            dict[
                Annotated[str, Meta(min_length=1, max_length=64)],
                Annotated[str, Meta(max_length=256)],
            ],
            Meta(max_length=32),
        ]
        | None
    ) = None
    handler_version: Annotated[str, Meta(max_length=64)] | None = None


class TaskStep(TaskFields, tag="task", tag_field="kind", forbid_unknown_fields=True, kw_only=True):
    id: StepId
    next: StepId | None = None
    description: str | None = None
    on_failure: StepId | None = None


class Choice(Struct, forbid_unknown_fields=True):
    when: Source
    next: StepId


class ChoiceStep(Struct, tag="choice", tag_field="kind", forbid_unknown_fields=True,
                 omit_defaults=True):  # fmt: skip
    id: StepId
    choices: Annotated[list[Choice], Meta(min_length=1, max_length=MAX_CHOICES)]
    default: StepId | None = None
    description: str | None = None


class Branch(Struct, forbid_unknown_fields=True, omit_defaults=True):
    name: StepId
    steps: list[Step]
    start: StepId | None = None


class ParallelStep(Struct, tag="parallel", tag_field="kind", forbid_unknown_fields=True,
                   omit_defaults=True):  # fmt: skip
    id: StepId
    branches: Annotated[list[Branch], Meta(min_length=1, max_length=MAX_BRANCHES)]
    next: StepId | None = None
    on_failure: StepId | None = None
    description: str | None = None


class MapStep(Struct, tag="map", tag_field="kind", forbid_unknown_fields=True,
              omit_defaults=True):  # fmt: skip
    id: StepId
    items: Source
    task: TaskFields
    max_concurrency: Annotated[int, Meta(ge=1, le=MAX_MAP_CONCURRENCY)] = 10
    next: StepId | None = None
    on_failure: StepId | None = None
    description: str | None = None


class TimerStep(Struct, tag="timer", tag_field="kind", forbid_unknown_fields=True,
                omit_defaults=True):  # fmt: skip
    id: StepId
    duration_ms: Annotated[int, Meta(ge=0, le=365 * DAY_MS)] | None = None
    until: Source | None = None
    next: StepId | None = None
    description: str | None = None


class SignalStep(Struct, tag="signal", tag_field="kind", forbid_unknown_fields=True,
                 omit_defaults=True):  # fmt: skip
    id: StepId
    name: Annotated[str, Meta(min_length=1, max_length=128)]
    timeout_ms: Millis | None = None
    on_timeout: StepId | None = None
    output: Source | None = None
    next: StepId | None = None
    description: str | None = None


class PollStep(Struct, tag="poll", tag_field="kind", forbid_unknown_fields=True,
               omit_defaults=True):  # fmt: skip
    id: StepId
    task: TaskFields
    until: Source
    max_rounds: Annotated[int, Meta(ge=1, le=MAX_POLL_ROUNDS)]
    interval_ms: Millis = POLL_INTERVAL_MS
    max_duration_ms: Millis | None = None
    on_exhausted: StepId | None = None
    on_failure: StepId | None = None
    next: StepId | None = None
    description: str | None = None


class ErrorSpec(Struct, forbid_unknown_fields=True):
    code: Annotated[str, Meta(min_length=1, max_length=64)]
    message: Annotated[str, Meta(max_length=2000)] = ""


class SucceedStep(Struct, tag="succeed", tag_field="kind", forbid_unknown_fields=True,
                  omit_defaults=True):  # fmt: skip
    id: StepId
    output: Source | None = None
    description: str | None = None


class FailStep(Struct, tag="fail", tag_field="kind", forbid_unknown_fields=True,
               omit_defaults=True):  # fmt: skip
    id: StepId
    error: ErrorSpec
    description: str | None = None


Step = (
    TaskStep | ChoiceStep | ParallelStep | MapStep | TimerStep | SignalStep | PollStep
    | SucceedStep | FailStep
)  # fmt: skip


class Body(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A definition as published (decision 0015, format 1)."""

    name: Name
    version: Version
    steps: Annotated[list[Step], Meta(min_length=1)]
    format: Literal[1] = 1
    description: Annotated[str, Meta(max_length=2000)] | None = None
    start: StepId | None = None
    output: Source | None = None


class DefinitionError(ValueError):
    """A definition that cannot be stored; ``reasons`` says every problem found."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = reasons


# Where a step sits: None for the top level, else (parallel step id, branch name).
ListKey = tuple[str, str] | None


@dataclass(frozen=True, slots=True)
class Definition:
    """A checked definition, ready for the engine."""

    body: Body
    digest: str
    steps: dict[str, Step]
    home: dict[str, ListKey]  # step id -> the list it belongs to
    starts: dict[ListKey, str]  # list -> its first step
    exprs: dict[tuple[str, str], Expression] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.body.name

    @property
    def version(self) -> str:
        return self.body.version

    @property
    def queues(self) -> frozenset[str]:
        """Every queue the definition's tasks go to."""
        return frozenset(fields.queue for _, fields in self.tasks())

    def tasks(self) -> Iterator[tuple[Step, TaskFields]]:
        """Each step that runs tasks, with their fields: a task step's own, a map's or a
        poll's ``task``."""
        for step in self.steps.values():
            fields = step if isinstance(step, TaskStep) else getattr(step, "task", None)
            if isinstance(fields, TaskFields):
                yield step, fields

    def expr(self, owner: str, role: str) -> Expression | None:
        """The compiled expression of ``owner`` (a step id, or "" for the definition) in
        ``role`` (``params``, ``output``, ``when.0``, ...)."""
        return self.exprs.get((owner, role))


def digest_of(body: Any) -> str:
    """SHA-256 over the canonical JSON (sorted keys) of a body."""
    return hashlib.sha256(msgspec.json.encode(body, order="sorted")).hexdigest()


def parse(raw: bytes | dict[str, Any]) -> Definition:
    """Decode and check a definition; raises :class:`DefinitionError` with every reason."""
    try:
        if isinstance(raw, bytes):
            body = msgspec.json.decode(raw, type=Body)
        else:
            body = msgspec.convert(raw, type=Body)
    except msgspec.ValidationError as exc:
        raise DefinitionError([str(exc)]) from None
    except msgspec.DecodeError as exc:
        raise DefinitionError([f"not JSON: {exc}"]) from None
    return check(body)


def check(body: Body) -> Definition:
    reasons: list[str] = []
    steps: dict[str, Step] = {}
    home: dict[str, ListKey] = {}
    starts: dict[ListKey, str] = {}
    lists: list[tuple[ListKey, list[Step], str | None]] = []

    def collect(key: ListKey, items: list[Step], start: str | None, depth: int) -> None:
        if depth > MAX_DEPTH:
            reasons.append(f"parallel steps nest deeper than {MAX_DEPTH} levels")
            return
        lists.append((key, items, start))
        for step in items:
            if step.id in steps:
                reasons.append(f"step id {step.id!r} is used twice")
                continue
            steps[step.id] = step
            home[step.id] = key
            if isinstance(step, ParallelStep):
                names = [b.name for b in step.branches]
                if len(set(names)) != len(names):
                    reasons.append(f"step {step.id!r}: branch names must be unique")
                for branch in step.branches:
                    if not branch.steps:
                        reasons.append(f"step {step.id!r}: branch {branch.name!r} has no steps")
                        continue
                    collect((step.id, branch.name), branch.steps, branch.start, depth + 1)

    collect(None, body.steps, body.start, 1)
    if len(steps) > MAX_STEPS:
        reasons.append(f"a definition has at most {MAX_STEPS} steps, not {len(steps)}")
    for key, items, start in lists:
        where = "the workflow" if key is None else f"branch {key[1]!r} of {key[0]!r}"
        ids = {s.id for s in items}
        first = start or items[0].id
        if first not in ids:
            reasons.append(f"{where}: start {first!r} is not one of its steps")
            continue
        starts[key] = first
        for step in items:
            for label, target in _targets(step):
                if target not in ids:
                    reasons.append(f"step {step.id!r}: {label} {target!r} is not a step of {where}")
        unreached = ids - _reachable(first, {s.id: s for s in items})
        for step_id in sorted(unreached):
            reasons.append(f"step {step_id!r} cannot be reached from {first!r}")
        # Only the top-level list: a branch's loop sees what its sibling branches' steps do
        # (``steps``), so a wait there can end; the step limit per instance bounds it.
        loop = _idle_loop(items) if key is None else []
        if loop:
            reasons.append(
                f"steps {' -> '.join(map(repr, loop))} form a loop without a task, map, poll "
                "or signal step in it, which nothing could end"
            )
    exprs = _compile_all(body, steps, reasons)
    for step in steps.values():
        if isinstance(step, TimerStep) and (step.duration_ms is None) == (step.until is None):
            reasons.append(f"step {step.id!r}: give exactly one of duration_ms and until")
    if reasons:
        raise DefinitionError(reasons)
    return Definition(
        body=body,
        digest=digest_of(body),
        steps=steps,
        home=home,
        starts=starts,
        exprs=exprs,
    )


def _targets(step: Step) -> Iterator[tuple[str, str]]:
    """The steps ``step`` may go to next, with the field that names each."""
    if isinstance(step, ChoiceStep):
        for i, choice in enumerate(step.choices):
            yield f"choices[{i}].next", choice.next
        if step.default is not None:
            yield "default", step.default
        return
    for label in ("next", "on_failure", "on_timeout", "on_exhausted"):
        target = getattr(step, label, None)
        if target is not None:
            yield label, target


def _reachable(first: str, by_id: dict[str, Step]) -> set[str]:
    seen = {first}
    todo = [first]
    while todo:
        step = by_id.get(todo.pop())
        if step is None:
            continue
        for _, target in _targets(step):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def _waits_for_work(step: Step) -> bool:
    """Whether an execution of ``step`` takes in something from outside the definition (a
    task's result, a signal): a parallel step does when one of its branches does."""
    if isinstance(step, TaskStep | MapStep | PollStep | SignalStep):
        return True
    if isinstance(step, ParallelStep):
        return any(_waits_for_work(inner) for b in step.branches for inner in b.steps)
    return False


def _idle_loop(items: list[Step]) -> list[str]:
    """A cycle of one step list through steps that take nothing in from outside (choices,
    timers, succeed/fail, parallel steps of such branches), as the ids along it; [] when
    there is none. Expressions see no clock and such steps add nothing new to what they
    see, so an instance that goes round such a loop twice goes round it forever."""
    by_id = {s.id: s for s in items if not _waits_for_work(s)}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(step_id: str, path: list[str]) -> list[str]:
        state[step_id] = 1
        path.append(step_id)
        for _, target in _targets(by_id[step_id]):
            if target not in by_id:
                continue
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                found = visit(target, path)
                if found:
                    return found
        path.pop()
        state[step_id] = 2
        return []

    for step_id in by_id:
        if step_id not in state:
            found = visit(step_id, [])
            if found:
                return found
    return []


BASE = frozenset({"input", "steps"})


def _compile_all(
    body: Body, steps: dict[str, Step], reasons: list[str]
) -> dict[tuple[str, str], Expression]:
    """Every expression of the definition, compiled for the variables its place gives it."""
    out: dict[tuple[str, str], Expression] = {}

    def add(owner: str, role: str, source: str | None, extra: frozenset[str] = frozenset()) -> None:
        if source is None:
            return
        try:
            out[(owner, role)] = compile_expression(source, variables=BASE | extra)
        except ExpressionInvalid as exc:
            where = "the workflow" if not owner else f"step {owner!r}"
            reasons.append(f"{where}: {role}: {exc}")

    def add_task(owner: str, task: TaskFields, extra: frozenset[str]) -> None:
        if task.retry is not None:
            try:
                given = msgspec.structs.asdict(task.retry)
                RetryPolicy(**{k: v for k, v in given.items() if v is not None})
            except (TypeError, ValueError) as exc:
                reasons.append(f"step {owner!r}: {exc}")
        add(owner, "params", task.params, extra)
        add(owner, "output", task.output, extra | {"result"})
        add(owner, "concurrency_key", task.concurrency_key, extra)
        add(owner, "fairness_key", task.fairness_key, extra)

    add("", "output", body.output)
    for step in steps.values():
        if isinstance(step, TaskStep):
            add_task(step.id, step, frozenset())
        elif isinstance(step, ChoiceStep):
            for i, choice in enumerate(step.choices):
                add(step.id, f"when.{i}", choice.when)
        elif isinstance(step, MapStep):
            add(step.id, "items", step.items)
            add_task(step.id, step.task, frozenset({"item", "index"}))
        elif isinstance(step, TimerStep):
            add(step.id, "until", step.until)
        elif isinstance(step, SignalStep):
            add(step.id, "output", step.output, frozenset({"signal"}))
        elif isinstance(step, PollStep):
            add_task(step.id, step.task, frozenset({"round"}))
            add(step.id, "until", step.until, frozenset({"result", "round"}))
        elif isinstance(step, SucceedStep):
            add(step.id, "output", step.output)
    return out


def check_timeouts(definition: Definition, max_timeout_ms: int) -> None:
    """Refuse task timeouts beyond the server's ``ORBIT_MAX_TASK_TIMEOUT_MS``."""
    reasons = []
    for step, fields in definition.tasks():
        timeout = fields.timeout_ms
        if timeout is not None and timeout > max_timeout_ms:
            reasons.append(f"step {step.id!r}: timeout_ms must be at most {max_timeout_ms}")
    if reasons:
        raise DefinitionError(reasons)


def schema() -> dict[str, Any]:
    """The JSON Schema of the format (``contracts/workflow-definition.schema.json``)."""
    return msgspec.json.schema(Body)
