"""Wire types of bulk operations (``POST /v1/tasks:bulk``, ``/v1/bulk-operations``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from orbit_server.api.wire import Request
from orbit_server.api.wire_tasks import ErrorIn, Name, Task
from orbit_server.clock import to_rfc3339
from orbit_server.pulse.model import BulkItem as BulkItemRecord
from orbit_server.pulse.model import BulkRecord

Moment = Annotated[datetime, msgspec.Meta(tz=True)]
TaskStateName = Literal[
    "scheduled", "pending", "leased", "running", "succeeded", "failed", "cancelled", "needs_review"
]
MAX_IDS = 1000


class BulkFilterIn(Request):
    """Every given field must match; at least one must be given."""

    queue: Name | None = None
    state: TaskStateName | list[TaskStateName] | None = None
    type: Name | None = None
    label: Annotated[str, msgspec.Meta(pattern=r"^[^:]+:.*$", max_length=400)] | None = None
    created_after: Moment | None = None
    created_before: Moment | None = None
    finished_after: Moment | None = None
    finished_before: Moment | None = None
    error_code: Annotated[str, msgspec.Meta(min_length=1, max_length=100)] | None = None
    ids: Annotated[list[str], msgspec.Meta(min_length=1, max_length=MAX_IDS)] | None = None


class BulkParamsIn(Request):
    """What the action needs: ``reason`` (cancel), ``outcome`` with ``result`` or ``error``
    (resolve), ``priority`` (set_priority), ``run_at`` (move_run_at)."""

    reason: Annotated[str, msgspec.Meta(max_length=500)] | None = None
    outcome: Literal["succeeded", "failed"] | None = None
    result: Any = None
    error: ErrorIn | None = None
    priority: Annotated[int, msgspec.Meta(ge=-1_000_000, le=1_000_000)] | None = None
    run_at: Moment | None = None


class TaskBulkIn(Request):
    action: Literal["cancel", "retry", "resolve", "set_priority", "move_run_at"]
    filter: BulkFilterIn
    params: BulkParamsIn = msgspec.field(default_factory=BulkParamsIn)
    dry_run: bool = False


class BulkDryRun(msgspec.Struct):
    dry_run: bool
    action: str
    matched: int
    sample: list[Task]


WorkflowStateName = Literal["running", "paused", "needs_review", "succeeded", "failed", "cancelled"]


class WorkflowFilterIn(Request):
    """Every given field must match; at least one must be given."""

    definition: Name | None = None
    state: WorkflowStateName | list[WorkflowStateName] | None = None
    created_after: Moment | None = None
    created_before: Moment | None = None
    ids: Annotated[list[str], msgspec.Meta(min_length=1, max_length=MAX_IDS)] | None = None


class WorkflowBulkParamsIn(Request):
    """``reason`` (cancel, pause, resume), ``step`` (retry_step: the step's key)."""

    reason: Annotated[str, msgspec.Meta(max_length=500)] | None = None
    step: Annotated[str, msgspec.Meta(min_length=1, max_length=160)] | None = None


class WorkflowBulkIn(Request):
    action: Literal["cancel", "pause", "resume", "retry_step"]
    filter: WorkflowFilterIn
    params: WorkflowBulkParamsIn = msgspec.field(default_factory=WorkflowBulkParamsIn)
    dry_run: bool = False


class WorkflowBulkDryRun(msgspec.Struct):
    dry_run: bool
    action: str
    matched: int
    sample: list[str]  # the first matching workflow ids


class BulkOperation(msgspec.Struct):
    id: str
    kind: str
    action: str
    state: str
    filter: dict[str, Any]
    params: dict[str, Any]
    matched: int
    done: int
    skipped: int
    failed: int
    remaining: int
    skipped_reasons: dict[str, int]
    created_by: str
    created_at: str
    updated_at: str
    finished_at: str | None

    @classmethod
    def of(cls, op: BulkRecord) -> BulkOperation:
        return cls(
            id=op.id,
            kind=op.kind,
            action=op.action,
            state=op.state,
            filter=op.filter,
            params=op.params,
            matched=op.matched,
            done=op.done,
            skipped=op.skipped,
            failed=op.failed,
            remaining=op.matched - op.done - op.skipped - op.failed,
            skipped_reasons=op.skipped_reasons,
            created_by=op.created_by,
            created_at=to_rfc3339(op.created_at) or "",
            updated_at=to_rfc3339(op.updated_at) or "",
            finished_at=to_rfc3339(op.finished_at),
        )


class BulkOperationList(msgspec.Struct):
    items: list[BulkOperation]
    next_cursor: str | None


class BulkItem(msgspec.Struct):
    seq: int
    target_id: str
    state: str
    reason: str | None

    @classmethod
    def of(cls, item: BulkItemRecord) -> BulkItem:
        return cls(item.seq, item.target_id, item.state, item.reason)


class BulkItemList(msgspec.Struct):
    items: list[BulkItem]
    next_cursor: str | None
