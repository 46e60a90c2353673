"""Wire models of the Workflows section of API.md."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from orbit_server.api.wire import Request
from orbit_server.clock import to_rfc3339
from orbit_server.weave import model as weave_model
from orbit_server.weave.service import Inspection

Key = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=r"^\S(.*\S)?$")]
Reason = Annotated[str, msgspec.Meta(max_length=500)]


class DefinitionSummary(msgspec.Struct):
    name: str
    version: str
    digest: str
    created_at: str

    @classmethod
    def of(cls, record: weave_model.StoredDefinition) -> DefinitionSummary:
        return cls(record.name, record.version, record.digest, to_rfc3339(record.created_at) or "")


class WorkflowDefinition(DefinitionSummary):
    definition: dict[str, Any]

    @classmethod
    def full(cls, record: weave_model.StoredDefinition) -> WorkflowDefinition:
        return cls(
            record.name, record.version, record.digest, to_rfc3339(record.created_at) or "",
            definition=record.body or {},
        )  # fmt: skip


class DefinitionList(msgspec.Struct):
    items: list[DefinitionSummary]
    next_cursor: str | None


class WorkflowStart(Request):
    definition: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    version: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | None = None
    input: Any = None
    idempotency_key: Key | None = None


class SignalIn(Request):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    payload: Any = None
    idempotency_key: Key | None = None


class ControlIn(Request):
    reason: Reason | None = None


class RetryIn(Request):
    pass


class SkipIn(Request):
    output: Any = None


class StepErrorIn(Request):
    code: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    message: Annotated[str, msgspec.Meta(max_length=2000)] = ""


class ResolveIn(Request):
    outcome: Literal["succeeded", "failed"]
    output: Any = None
    error: StepErrorIn | None = None


class Step(msgspec.Struct):
    step: str
    key: str
    type: str
    state: str
    task_id: str | None
    round: int | None
    item: int | None
    branch: str | None
    parent: str | None
    output: Any
    error: dict[str, Any] | None
    started_at: str
    ended_at: str | None

    @classmethod
    def of(cls, row: weave_model.StepExecution) -> Step:
        return cls(
            step=row.step, key=row.key, type=row.kind, state=row.state, task_id=row.task_id,
            round=row.round, item=row.item, branch=row.branch, parent=row.parent_key,
            output=row.output, error=row.error, started_at=to_rfc3339(row.started_at) or "",
            ended_at=to_rfc3339(row.ended_at),
        )  # fmt: skip


class Wait(msgspec.Struct):
    key: str
    step: str
    kind: str
    until: str | None
    signal: str | None


class PendingSignal(msgspec.Struct):
    id: str
    name: str
    created_at: str


class Signal(msgspec.Struct):
    id: str
    name: str
    state: str
    step: str | None
    created_at: str

    @classmethod
    def of(cls, record: weave_model.Signal) -> Signal:
        return cls(
            record.id, record.name, str(record.state), record.step_key,
            to_rfc3339(record.created_at) or "",
        )  # fmt: skip


class Workflow(msgspec.Struct, omit_defaults=True):
    id: str
    definition: str
    version: str
    state: str
    input: Any
    output: Any
    error: dict[str, Any] | None
    control_version: int
    created_at: str
    updated_at: str
    finished_at: str | None
    steps: list[Step] | UnsetType = UNSET
    waits: list[Wait] | UnsetType = UNSET
    pending_signals: list[PendingSignal] | UnsetType = UNSET

    @classmethod
    def of(cls, w: weave_model.Workflow) -> Workflow:
        return cls(
            id=w.id, definition=w.definition, version=w.version, state=w.state, input=w.input,
            output=w.output, error=w.error, control_version=w.control_version,
            created_at=to_rfc3339(w.created_at) or "", updated_at=to_rfc3339(w.updated_at) or "",
            finished_at=to_rfc3339(w.finished_at),
        )  # fmt: skip

    @classmethod
    def inspected(cls, seen: Inspection) -> Workflow:
        view = cls.of(seen.workflow)
        view.steps = [Step.of(r) for r in seen.steps]
        view.waits = [_wait(r, seen) for r in seen.waits]
        view.pending_signals = [
            PendingSignal(s.id, s.name, to_rfc3339(s.created_at) or "") for s in seen.signals
        ]
        return view


def _wait(row: weave_model.StepExecution, seen: Inspection) -> Wait:
    signal = None
    if row.kind == "signal":
        signal = seen.signal_names.get(row.step)
    return Wait(row.key, row.step, row.kind, to_rfc3339(row.due_at), signal)


class WorkflowList(msgspec.Struct):
    items: list[Workflow]
    next_cursor: str | None


class StepList(msgspec.Struct):
    items: list[Step]
    next_cursor: str | None
