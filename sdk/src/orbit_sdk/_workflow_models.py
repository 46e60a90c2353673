"""The workflow wire contract: typed objects, and for each call what it sends and reads.

As in ``_models``, objects decode leniently (fields a later server adds are ignored) and every
call is first described as an :class:`~orbit_sdk._models.Operation`, without I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, TypeAlias

import msgspec

from orbit_sdk._models import Operation, Outcome, _segment
from orbit_sdk._workflow import Workflow

__all__ = [
    "WORKFLOW_TERMINAL_STATES",
    "DefinitionSource",
    "PendingSignal",
    "WorkflowDefinition",
    "WorkflowDefinitionPage",
    "WorkflowError",
    "WorkflowInstance",
    "WorkflowPage",
    "WorkflowSignal",
    "WorkflowStep",
    "WorkflowStepPage",
    "WorkflowWait",
    "workflow_cancel",
    "workflow_definition_get",
    "workflow_definition_list",
    "workflow_definition_publish",
    "workflow_get",
    "workflow_list",
    "workflow_pause",
    "workflow_resume",
    "workflow_signal",
    "workflow_start",
    "workflow_step_list",
    "workflow_step_resolve",
    "workflow_step_retry",
    "workflow_step_skip",
]

WORKFLOW_TERMINAL_STATES: Final = frozenset({"succeeded", "failed", "cancelled"})

DefinitionSource: TypeAlias = Workflow | Mapping[str, Any]
"""A definition as ``publish_workflow`` takes it: a :class:`~orbit_sdk.Workflow` builder, or a
mapping shaped like the definition JSON (sent as it is)."""


class WorkflowError(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Why a workflow or a step failed: a ``fail`` step's code, a task's error code, or one of
    Orbit's own (``expression_failed``, ``task_invalid``, ``no_choice``, ``signal_timeout``,
    ``poll_exhausted``, ``cancelled``, ...).

    On an instance, ``step`` names the top-level step execution (its key) that failed it, when
    one did, and ``cause`` the execution inside it that failed first when that was another
    (a branch's step, a map's item such as ``resize:i17``, a poll's round). Passed to
    ``resolve_workflow_step`` it is the error the step fails with.
    """

    code: str
    message: str = ""
    step: str | None = None
    cause: str | None = None


class WorkflowDefinition(msgspec.Struct, frozen=True, kw_only=True):
    """A published definition version. ``digest`` is the SHA-256 of its canonical JSON.

    ``definition`` is the definition JSON as stored; ``None`` in the items of a list.
    """

    name: str
    version: str
    digest: str
    created_at: datetime
    definition: dict[str, Any] | None = None


class WorkflowDefinitionPage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of definition versions (without their JSON). ``next_cursor`` is ``None`` on
    the last page."""

    items: list[WorkflowDefinition]
    next_cursor: str | None = None


class WorkflowStep(msgspec.Struct, frozen=True, kw_only=True):
    """One execution of a step: the first visit of step ``charge`` has the key ``charge``,
    a second visit (a loop through a ``choice``) ``charge:2``, item 17 of the map step
    ``resize`` ``resize:i17``, round 3 of the poll step ``check`` ``check:r3``."""

    step: str
    """The step's id in the definition."""
    key: str
    """This execution's key within the instance; the recovery calls take it."""
    type: str
    """The step's kind: ``task``, ``choice``, ``parallel``, ``map``, ``timer``, ``signal``,
    ``poll``, ``succeed`` or ``fail``; ``task`` for map items and poll rounds."""
    state: str
    """``pending``, ``running``, ``waiting``, ``succeeded``, ``failed``, ``skipped``,
    ``cancelled`` or ``needs_review``."""
    task_id: str | None = None
    """The task this execution runs: for ``task`` steps, map items and poll rounds."""
    round: int | None = None
    """A poll round's number, from 1."""
    item: int | None = None
    """A map item's index, from 0."""
    branch: str | None = None
    """The name of the ``parallel`` branch it runs in, if it runs in one."""
    parent: str | None = None
    """The key of the ``parallel``, ``map`` or ``poll`` execution it belongs to, if any."""
    output: Any = None
    error: WorkflowError | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None


class WorkflowWait(msgspec.Struct, frozen=True, kw_only=True):
    """Something an instance waits for: a timer, a signal, a poll's next round, or a step
    held back for a moment (past the work of one transaction, or for room in a full
    queue)."""

    key: str
    """The waiting step execution's key."""
    step: str
    kind: str
    """What kind of wait it is (the waiting step's kind, such as ``timer`` or ``signal``)."""
    until: datetime | None = None
    """When the wait ends on its own (a timer's end, a signal's timeout, a poll's next
    round), if ever."""
    signal: str | None = None
    """The name of the signal it waits for, if it waits for one."""


class PendingSignal(msgspec.Struct, frozen=True, kw_only=True):
    """A signal that arrived before a step waited for it; the next ``signal`` step of that
    name takes it."""

    id: str
    name: str
    created_at: datetime


class WorkflowInstance(msgspec.Struct, frozen=True, kw_only=True):
    """A workflow instance as Orbit reports it. Times are timezone-aware UTC datetimes.

    The items of a list have no ``steps``, ``waits`` or ``pending_signals`` (they read as
    empty lists); :meth:`~orbit_sdk.Client.get_workflow` has them all.
    """

    id: str
    definition: str
    """The definition's name."""
    version: str
    """The definition version it runs, fixed at its start."""
    state: str
    """``running``, ``paused``, ``needs_review``, ``succeeded``, ``failed`` or ``cancelled``."""
    input: Any = None
    output: Any = None
    """Once ``succeeded``: the definition's ``output`` expression if it has one, else the
    output of the step that ended the top-level list (a ``succeed`` step, or its last)."""
    error: WorkflowError | None = None
    """Why it ``failed`` or was ``cancelled``."""
    control_version: int
    """0 at the start; one more with each pause, resume, and step retry or skip that runs a
    failed instance again."""
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    steps: list[WorkflowStep] = msgspec.field(default_factory=list)
    """Its step executions in the order they began: the newest 500, without map items and
    poll rounds (``iter_workflow_steps`` reads every one)."""
    waits: list[WorkflowWait] = msgspec.field(default_factory=list)
    """What it waits for now (at most 100)."""
    pending_signals: list[PendingSignal] = msgspec.field(default_factory=list)
    """Signals no step has taken yet (at most 100)."""

    @property
    def is_terminal(self) -> bool:
        """``succeeded``, ``failed`` or ``cancelled``: nothing more will happen to it."""
        return self.state in WORKFLOW_TERMINAL_STATES


class WorkflowPage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of instances (without steps, waits or pending signals). ``next_cursor`` is
    ``None`` on the last page."""

    items: list[WorkflowInstance]
    next_cursor: str | None = None


class WorkflowStepPage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of an instance's step executions. ``next_cursor`` is ``None`` on the last
    page."""

    items: list[WorkflowStep]
    next_cursor: str | None = None


class WorkflowSignal(msgspec.Struct, frozen=True, kw_only=True):
    """A signal as Orbit took it: ``delivered`` to a waiting step (``step`` is its key), or
    ``pending`` until a step of that name waits. Sending its idempotency key again answers
    this signal, as it is now."""

    id: str
    name: str
    state: str
    step: str | None = None
    created_at: datetime


_definition: Final = msgspec.json.Decoder(WorkflowDefinition)
_definition_page: Final = msgspec.json.Decoder(WorkflowDefinitionPage)
_instance: Final = msgspec.json.Decoder(WorkflowInstance)
_instance_page: Final = msgspec.json.Decoder(WorkflowPage)
_step_page: Final = msgspec.json.Decoder(WorkflowStepPage)
_signal: Final = msgspec.json.Decoder(WorkflowSignal)

_DEFINITIONS: Final = "/v1/workflow-definitions"
_WORKFLOWS: Final = "/v1/workflows"


def _path(workflow_id: str, *rest: str) -> str:
    return "/".join([_WORKFLOWS, _segment(workflow_id), *rest])


def _step_path(workflow_id: str, key: str, action: str) -> str:
    # Step keys hold ':' (``charge:2``, ``resize:i17``): quoted like every path segment.
    return _path(workflow_id, "steps", _segment(key), action)


def _control_body(reason: str | None) -> dict[str, Any]:
    # Always a JSON object, even an empty one, so the body never depends on the reason.
    return {} if reason is None else {"reason": reason}


def workflow_definition_publish(definition: DefinitionSource) -> Operation[WorkflowDefinition]:
    """``POST /v1/workflow-definitions``: the definition JSON is the body."""
    body = definition.to_dict() if isinstance(definition, Workflow) else dict(definition)
    return Operation("POST", _DEFINITIONS, _definition.decode, body)


def workflow_definition_get(name: str, version: str) -> Operation[WorkflowDefinition]:
    """``GET /v1/workflow-definitions/{name}/versions/{version}``."""
    path = "/".join([_DEFINITIONS, _segment(name), "versions", _segment(version)])
    return Operation("GET", path, _definition.decode)


def workflow_definition_list(
    *, name: str | None, limit: int | None, cursor: str | None
) -> Operation[WorkflowDefinitionPage]:
    """``GET /v1/workflow-definitions``: one page, of one name's versions when given."""
    params = {"name": name, "limit": limit, "cursor": cursor}
    return Operation("GET", _DEFINITIONS, _definition_page.decode, params=params)


def workflow_start(
    definition: str, input: Any, *, version: str | None, idempotency_key: str | None
) -> Operation[WorkflowInstance]:
    """``POST /v1/workflows``: only the fields given; no ``version`` starts the latest."""
    body: dict[str, Any] = {"definition": definition}
    if version is not None:
        body["version"] = version
    if input is not None:
        body["input"] = input
    if idempotency_key is not None:
        body["idempotency_key"] = idempotency_key
    return Operation("POST", _WORKFLOWS, _instance.decode, body)


def workflow_get(
    workflow_id: str, *, wait_ms: int | None = None, timeout: float | None = None
) -> Operation[WorkflowInstance]:
    """``GET /v1/workflows/{id}``, long-polling for up to ``wait_ms`` when given."""
    params = None if wait_ms is None else {"wait_ms": wait_ms}
    return Operation("GET", _path(workflow_id), _instance.decode, params=params, timeout=timeout)


def workflow_list(
    *, definition: str | None, state: str | None, limit: int | None, cursor: str | None
) -> Operation[WorkflowPage]:
    """``GET /v1/workflows``: one page; filters combine."""
    params = {"definition": definition, "state": state, "limit": limit, "cursor": cursor}
    return Operation("GET", _WORKFLOWS, _instance_page.decode, params=params)


def workflow_step_list(
    workflow_id: str, *, limit: int | None, cursor: str | None
) -> Operation[WorkflowStepPage]:
    """``GET /v1/workflows/{id}/steps``: one page of step executions."""
    params = {"limit": limit, "cursor": cursor}
    return Operation("GET", _path(workflow_id, "steps"), _step_page.decode, params=params)


def workflow_signal(
    workflow_id: str, name: str, payload: Any, *, idempotency_key: str | None
) -> Operation[WorkflowSignal]:
    """``POST /v1/workflows/{id}/signals``: answered ``202``."""
    body: dict[str, Any] = {"name": name}
    if payload is not None:
        body["payload"] = payload
    if idempotency_key is not None:
        body["idempotency_key"] = idempotency_key
    return Operation("POST", _path(workflow_id, "signals"), _signal.decode, body)


def workflow_pause(workflow_id: str, reason: str | None) -> Operation[WorkflowInstance]:
    """``POST /v1/workflows/{id}/pause``."""
    body = _control_body(reason)
    return Operation("POST", _path(workflow_id, "pause"), _instance.decode, body)


def workflow_resume(workflow_id: str, reason: str | None) -> Operation[WorkflowInstance]:
    """``POST /v1/workflows/{id}/resume``."""
    body = _control_body(reason)
    return Operation("POST", _path(workflow_id, "resume"), _instance.decode, body)


def workflow_cancel(workflow_id: str, reason: str | None) -> Operation[WorkflowInstance]:
    """``POST /v1/workflows/{id}/cancel``."""
    body = _control_body(reason)
    return Operation("POST", _path(workflow_id, "cancel"), _instance.decode, body)


def workflow_step_retry(workflow_id: str, key: str) -> Operation[WorkflowInstance]:
    """``POST /v1/workflows/{id}/steps/{key}/retry``, with an empty object."""
    path = _step_path(workflow_id, key, "retry")
    return Operation("POST", path, _instance.decode, {})


def workflow_step_skip(workflow_id: str, key: str, output: Any) -> Operation[WorkflowInstance]:
    """``POST /v1/workflows/{id}/steps/{key}/skip``: ``output`` is always sent, null too."""
    path = _step_path(workflow_id, key, "skip")
    return Operation("POST", path, _instance.decode, {"output": output})


def workflow_step_resolve(
    workflow_id: str,
    key: str,
    outcome: Outcome,
    output: Any,
    error: WorkflowError | Mapping[str, Any] | None,
) -> Operation[WorkflowInstance]:
    """``POST /v1/workflows/{id}/steps/{key}/resolve``: a succeeded step always has an
    ``output`` (null by default); Orbit checks that the outcome and its fields agree."""
    body: dict[str, Any] = {"outcome": outcome}
    if outcome == "succeeded" or output is not None:
        body["output"] = output
    if error is not None:
        body["error"] = error if isinstance(error, WorkflowError) else dict(error)
    path = _step_path(workflow_id, key, "resolve")
    return Operation("POST", path, _instance.decode, body)
