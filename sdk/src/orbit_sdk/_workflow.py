"""The workflow builder: Python objects in, a workflow definition (format 1, decision 0015) out.

Nothing here runs or ships code. Conditions and data mappings are CEL expressions, kept as
strings and evaluated by Orbit. The builder checks only what is cheap and certain (step ids used
twice, fields that exclude each other, durations); Orbit validates the rest when the definition
is published, and answers ``422 definition_invalid`` with its reasons.

Within one step list (the workflow's, or a parallel branch's), a step that can have a ``next``
continues with the step declared after it, unless it names another (``next="..."``) or ends the
list (``end=True``). ``choice``, ``succeed`` and ``fail`` never continue on their own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Self, TypeAlias

import msgspec

from orbit_sdk._models import RetryPolicy, SideEffect

__all__ = ["FORMAT", "Branch", "Duration", "Parallel", "StepList", "TaskStep", "When", "Workflow"]

FORMAT: Final = 1
"""The definition format this builder writes."""

Duration: TypeAlias = timedelta | int
"""A duration: a ``timedelta``, or an ``int`` of milliseconds. Sent as ``*_ms`` integers."""

_MILLISECOND: Final = timedelta(milliseconds=1)


def _ms(name: str, value: Duration) -> int:
    if isinstance(value, bool) or not isinstance(value, timedelta | int):
        raise TypeError(f"{name} must be a timedelta or an int of milliseconds: {value!r}")
    if isinstance(value, timedelta):
        whole, rest = divmod(value, _MILLISECOND)
        if rest:
            raise ValueError(f"{name} must be a whole number of milliseconds: {value}")
        value = whole
    if value < 0:
        raise ValueError(f"{name} must not be negative: {value} ms")
    return value


def _given(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The fields that were given (not None): the server applies its defaults to the others."""
    return {name: value for name, value in fields.items() if value is not None}


@dataclass(frozen=True, kw_only=True)
class TaskStep:
    """The task a ``map`` runs for each item, or a ``poll`` runs each round.

    The same fields as :meth:`StepList.task`, without the step's own ``id``, ``next`` and
    ``on_failure``. ``params``, ``output``, ``concurrency_key`` and ``fairness_key`` are CEL
    expressions: a map's also see ``item`` and ``index``, a poll's ``round``.
    """

    queue: str
    type: str
    params: str | None = None
    """The task's params (default: ``input``, the instance's input; not the previous step's
    output)."""
    output: str | None = None
    """The step's output, an expression over ``result`` (default: ``result``)."""
    retry: RetryPolicy | None = None
    timeout: Duration | None = None
    priority: int | None = None
    side_effect: SideEffect | None = None
    concurrency_key: str | None = None
    fairness_key: str | None = None
    labels: Mapping[str, str] | None = None
    handler_version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The task's fields as the definition holds them; only those given."""
        return _given(
            {
                "queue": self.queue,
                "type": self.type,
                "params": self.params,
                "output": self.output,
                "retry": None if self.retry is None else msgspec.to_builtins(self.retry),
                "timeout_ms": None if self.timeout is None else _ms("timeout", self.timeout),
                "priority": self.priority,
                "side_effect": self.side_effect,
                "concurrency_key": self.concurrency_key,
                "fairness_key": self.fairness_key,
                "labels": None if self.labels is None else dict(self.labels),
                "handler_version": self.handler_version,
            }
        )


@dataclass(frozen=True)
class When:
    """One branch of a ``choice``: go to step ``next`` when the CEL condition ``when`` holds."""

    when: str
    next: str


@dataclass(slots=True)
class _Step:
    id: str
    kind: str
    fields: dict[str, Any]
    chains: bool
    """Whether the step continues with the one declared after it when it names none."""
    next: str | None = None
    end: bool = False
    description: str | None = None
    parallel: Parallel | None = None


class StepList:
    """One list of steps: a workflow's top level, or a branch of a ``parallel`` step.

    Each method adds one step and returns the list (``parallel`` returns the new step's
    :class:`Parallel`, to add branches to). ``step_id`` is unique in the whole definition.
    Fields left ``None`` are not sent, so Orbit's defaults apply.
    """

    def __init__(self, ids: set[str]) -> None:
        self._ids = ids  # shared by every list of one definition
        self._steps: list[_Step] = []

    def __len__(self) -> int:
        return len(self._steps)

    @property
    def step_ids(self) -> list[str]:
        """The ids of this list's steps, in order."""
        return [step.id for step in self._steps]

    def task(
        self,
        step_id: str,
        *,
        queue: str,
        type: str,
        params: str | None = None,
        output: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        priority: int | None = None,
        side_effect: SideEffect | None = None,
        concurrency_key: str | None = None,
        fairness_key: str | None = None,
        labels: Mapping[str, str] | None = None,
        handler_version: str | None = None,
        on_failure: str | None = None,
        next: str | None = None,
        end: bool = False,
        description: str | None = None,
    ) -> Self:
        """A ``task`` step: one task on ``queue``; its output is ``output`` over ``result``.

        ``params`` (default ``input``, the instance's input), ``output``, ``concurrency_key``
        and ``fairness_key`` are CEL expressions. A task that fails for good (after its own
        retries) goes to ``on_failure``, or fails the step's list: the workflow, or the
        parallel branch it is in.
        """
        template = TaskStep(
            queue=queue,
            type=type,
            params=params,
            output=output,
            retry=retry,
            timeout=timeout,
            priority=priority,
            side_effect=side_effect,
            concurrency_key=concurrency_key,
            fairness_key=fairness_key,
            labels=labels,
            handler_version=handler_version,
        )
        fields = {**template.to_dict(), **_given({"on_failure": on_failure})}
        self._add(step_id, "task", fields, next=next, end=end, description=description)
        return self

    def choice(
        self,
        step_id: str,
        choices: Sequence[When],
        *,
        default: str | None = None,
        description: str | None = None,
    ) -> Self:
        """A ``choice`` step: the first :class:`When` whose condition holds names the next
        step, else ``default`` (neither: the step fails, ``no_choice``). Its output is the
        previous step's, passed through."""
        fields = _given(
            {
                "choices": [{"when": when.when, "next": when.next} for when in choices],
                "default": default,
            }
        )
        self._add(step_id, "choice", fields, chains=False, description=description)
        return self

    def parallel(
        self,
        step_id: str,
        *,
        on_failure: str | None = None,
        next: str | None = None,
        end: bool = False,
        description: str | None = None,
    ) -> Parallel:
        """A ``parallel`` step: its branches run at once; add them with
        :meth:`Parallel.branch`. Its output is ``{branch name: the branch's last output}``.
        A branch that fails cancels the others' work, and the step goes to ``on_failure``
        or fails its own list."""
        parallel = Parallel(self._ids)
        fields = _given({"on_failure": on_failure})
        self._add(
            step_id,
            "parallel",
            fields,
            next=next,
            end=end,
            description=description,
            parallel=parallel,
        )
        return parallel

    def map(
        self,
        step_id: str,
        *,
        items: str,
        task: TaskStep,
        max_concurrency: int | None = None,
        on_failure: str | None = None,
        next: str | None = None,
        end: bool = False,
        description: str | None = None,
    ) -> Self:
        """A ``map`` step: ``task`` once per item of the list ``items`` (an expression; at
        most 100,000 items), at most ``max_concurrency`` at a time (Orbit's default: 10, at
        most 1,000). The task's expressions also see ``item`` and ``index``; the output is
        the items' outputs, in item order. An item that fails cancels the others, and the
        step goes to ``on_failure`` or fails its list."""
        fields = _given(
            {
                "items": items,
                "max_concurrency": max_concurrency,
                "task": task.to_dict(),
                "on_failure": on_failure,
            }
        )
        self._add(step_id, "map", fields, next=next, end=end, description=description)
        return self

    def timer(
        self,
        step_id: str,
        *,
        duration: Duration | None = None,
        until: str | None = None,
        next: str | None = None,
        end: bool = False,
        description: str | None = None,
    ) -> Self:
        """A ``timer`` step: wait ``duration``, or until the time ``until`` (an expression
        giving an RFC 3339 time with its offset; a past time ends the wait at once); give
        exactly one. Its output is null."""
        if (duration is None) == (until is None):
            raise ValueError(f"timer {step_id!r} needs exactly one of duration and until")
        fields = _given(
            {
                "duration_ms": None if duration is None else _ms("duration", duration),
                "until": until,
            }
        )
        self._add(step_id, "timer", fields, next=next, end=end, description=description)
        return self

    def signal(
        self,
        step_id: str,
        *,
        name: str,
        timeout: Duration | None = None,
        on_timeout: str | None = None,
        output: str | None = None,
        next: str | None = None,
        end: bool = False,
        description: str | None = None,
    ) -> Self:
        """A ``signal`` step: wait for the signal ``name`` (``signal_workflow``; one sent
        earlier and kept is taken at once), for at most ``timeout``, then go to
        ``on_timeout`` (without it the step fails, ``signal_timeout``). Its output is
        ``output`` over ``signal`` (default: the signal's payload)."""
        fields = _given(
            {
                "name": name,
                "timeout_ms": None if timeout is None else _ms("timeout", timeout),
                "on_timeout": on_timeout,
                "output": output,
            }
        )
        self._add(step_id, "signal", fields, next=next, end=end, description=description)
        return self

    def poll(
        self,
        step_id: str,
        *,
        task: TaskStep,
        until: str,
        max_rounds: int,
        interval: Duration | None = None,
        max_duration: Duration | None = None,
        on_exhausted: str | None = None,
        on_failure: str | None = None,
        next: str | None = None,
        end: bool = False,
        description: str | None = None,
    ) -> Self:
        """A ``poll`` step: run ``task`` in rounds (the first at once, then ``interval``
        apart; without it the server's default, one second) until the condition ``until``
        holds; it sees ``round`` and, as ``result``, the round's output (the task's
        ``output`` mapping applied). After ``max_rounds`` rounds, or when the next round
        would start past ``max_duration``, it goes to ``on_exhausted`` (without it the step
        fails, ``poll_exhausted``); a round whose task fails sends it to ``on_failure``. Its
        output is the last round's."""
        fields = _given(
            {
                "task": task.to_dict(),
                "until": until,
                "interval_ms": None if interval is None else _ms("interval", interval),
                "max_rounds": max_rounds,
                "max_duration_ms": (
                    None if max_duration is None else _ms("max_duration", max_duration)
                ),
                "on_exhausted": on_exhausted,
                "on_failure": on_failure,
            }
        )
        self._add(step_id, "poll", fields, next=next, end=end, description=description)
        return self

    def succeed(
        self, step_id: str, *, output: str | None = None, description: str | None = None
    ) -> Self:
        """A ``succeed`` step: its list ends here with ``output`` (an expression; default:
        the previous step's output). At the top level the workflow succeeds: a ``succeed``
        step's own ``output`` is the workflow's output, whatever the definition's ``output``
        says; without one, the definition's ``output`` (if it has one) gives it. In a parallel
        branch the branch ends with this step's output."""
        fields = _given({"output": output})
        self._add(step_id, "succeed", fields, chains=False, description=description)
        return self

    def fail(
        self,
        step_id: str,
        *,
        code: str,
        message: str | None = None,
        description: str | None = None,
    ) -> Self:
        """A ``fail`` step: its list fails with the error ``{code, message}``. At the top level
        the workflow fails; in a parallel branch the parallel step fails with this error (and
        goes to its ``on_failure``)."""
        fields = {"error": _given({"code": code, "message": message})}
        self._add(step_id, "fail", fields, chains=False, description=description)
        return self

    def _add(
        self,
        step_id: str,
        kind: str,
        fields: dict[str, Any],
        *,
        chains: bool = True,
        next: str | None = None,
        end: bool = False,
        description: str | None = None,
        parallel: Parallel | None = None,
    ) -> None:
        if step_id in self._ids:
            raise ValueError(f"step id {step_id!r} is used twice: ids are unique in a definition")
        if next is not None and end:
            raise ValueError(f"step {step_id!r} has a next step and end=True; give one")
        self._ids.add(step_id)
        self._steps.append(_Step(step_id, kind, fields, chains, next, end, description, parallel))

    def _steps_json(self) -> list[dict[str, Any]]:
        steps = []
        for position, step in enumerate(self._steps):
            body: dict[str, Any] = {"id": step.id, "kind": step.kind}
            if step.description is not None:
                body["description"] = step.description
            if step.parallel is not None:
                body["branches"] = step.parallel._branches_json()
            body.update(step.fields)
            follower = step.next
            if follower is None and step.chains and not step.end:
                later = self._steps[position + 1 : position + 2]
                follower = later[0].id if later else None
            if follower is not None:
                body["next"] = follower
            steps.append(body)
        return steps


class Branch(StepList):
    """One branch of a ``parallel`` step: a step list of its own, from ``start`` (default:
    its first step). Made by :meth:`Parallel.branch`."""

    def __init__(self, name: str, start: str | None, ids: set[str]) -> None:
        super().__init__(ids)
        self.name = name
        self.start = start

    def __repr__(self) -> str:
        return f"Branch({self.name!r}, steps={self.step_ids!r})"

    def _json(self) -> dict[str, Any]:
        return _given({"name": self.name, "steps": self._steps_json(), "start": self.start})


class Parallel:
    """A ``parallel`` step's branches; :meth:`StepList.parallel` makes it."""

    def __init__(self, ids: set[str]) -> None:
        self._ids = ids
        self._branches: list[Branch] = []

    @property
    def branches(self) -> list[Branch]:
        """The branches so far, in order."""
        return list(self._branches)

    def branch(self, name: str, *, start: str | None = None) -> Branch:
        """A new branch named ``name`` (unique in this step), to add steps to."""
        if any(branch.name == name for branch in self._branches):
            raise ValueError(f"branch {name!r} is used twice in one parallel step")
        branch = Branch(name, start, self._ids)
        self._branches.append(branch)
        return branch

    def _branches_json(self) -> list[dict[str, Any]]:
        return [branch._json() for branch in self._branches]


class Workflow(StepList):
    """A workflow definition under construction: add steps, then :meth:`to_dict` it or hand
    it to ``publish_workflow``.

    ``version`` names this content for good: publishing other content under it is refused
    (``version_exists``). ``output`` is a CEL expression for the workflow's output, evaluated
    when the top-level list ends, also at a ``succeed`` step without an ``output`` of its
    own (a ``succeed`` step's own ``output`` wins over it); without it, the output is the
    output of the step that ended the list. ``start`` is the first step (default: the
    first declared); it may also be set later, ``workflow.start = "charge"``.

    >>> wf = Workflow("greet", version="1")
    >>> wf.task("hello", queue="q", type="hello").succeed("done").to_dict()["steps"][0]["next"]
    'done'
    """

    def __init__(
        self,
        name: str,
        *,
        version: str,
        description: str | None = None,
        output: str | None = None,
        start: str | None = None,
    ) -> None:
        super().__init__(set())
        self.name = name
        self.version = version
        self.description = description
        self.output = output
        self.start = start

    def __repr__(self) -> str:
        return f"Workflow({self.name!r}, version={self.version!r}, steps={self.step_ids!r})"

    def to_dict(self) -> dict[str, Any]:
        """The definition as JSON data: what ``POST /v1/workflow-definitions`` takes."""
        head = _given(
            {
                "name": self.name,
                "version": self.version,
                "format": FORMAT,
                "description": self.description,
                "start": self.start,
                "output": self.output,
            }
        )
        return {**head, "steps": self._steps_json()}
