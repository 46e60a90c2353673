"""Weave's domain types: a stored definition, an instance, a step execution, a signal. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orbit_server.scope import Scope
from orbit_server.weave.states import SignalState, StepState, WorkflowState


@dataclass(frozen=True, slots=True)
class StoredDefinition:
    scope: Scope
    name: str
    version: str
    digest: str
    body: dict[str, Any] | None  # None in lists
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Workflow:
    id: str
    scope: Scope
    definition: str
    version: str
    state: WorkflowState
    input: Any
    output: Any
    error: dict[str, Any] | None
    context: dict[
        str, Any
    ]  # {"steps": {id: {"output", "error", "state"}}, "visits": {id: n}, "seq": n}
    control_version: int
    gate_id: str
    idempotency_key: str | None
    request_hash: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class StepExecution:
    workflow_id: str
    key: str
    seq: int
    step: str  # the definition's step id
    kind: str
    state: StepState
    parent_key: str | None
    branch: str | None
    item: int | None
    round: int | None
    task_id: str | None
    tries: int
    input: Any  # what the step started from: the previous output, a map item
    output: Any
    error: dict[str, Any] | None
    progress: dict[str, Any] | None
    followed: bool
    due_at: datetime | None
    wake_at: datetime | None
    started_at: datetime
    ended_at: datetime | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Signal:
    id: str
    workflow_id: str
    name: str
    payload: Any
    idempotency_key: str | None
    state: SignalState
    step_key: str | None
    created_at: datetime
    delivered_at: datetime | None
