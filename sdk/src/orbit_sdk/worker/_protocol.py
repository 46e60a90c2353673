"""The worker protocol's frames, version 1 (docs/protocol.md), as the SDK speaks them.

Frames are JSON text frames tagged by ``type``. The SDK keeps its own definitions (it never
imports the server); fields the server adds later are ignored on decoding. Timestamps decode
to timezone-aware ``datetime`` values.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal, TypeAlias

import msgspec

__all__ = [
    "PROTOCOL_VERSION",
    "AckItem",
    "Acked",
    "Cancel",
    "CancelItem",
    "Credit",
    "Delivery",
    "Drain",
    "Error",
    "ErrorInfo",
    "Frame",
    "HandlerInfo",
    "Heartbeat",
    "HeartbeatItem",
    "HeldVerdict",
    "Hello",
    "Ref",
    "Release",
    "Released",
    "ReleasedItem",
    "RenewAnswer",
    "Renewed",
    "Result",
    "ResultItem",
    "ServerFrame",
    "Start",
    "StartAnswer",
    "Started",
    "Tasks",
    "Welcome",
    "WorkerFrame",
    "WorkflowStep",
    "decode_server_frame",
    "decode_worker_frame",
    "encode_frame",
]

PROTOCOL_VERSION: Final = 1
MAX_PROGRESS_BYTES: Final = 4096  # a progress report, as JSON (docs/protocol.md, heartbeat)

Outcome: TypeAlias = Literal["succeeded", "failed", "cancelled"]
SideEffect: TypeAlias = Literal["idempotent", "unsafe"]


class Frame(msgspec.Struct, tag_field="type", kw_only=True, omit_defaults=True):
    """Base of every frame; the subclass's tag is its ``type``."""


class Ref(msgspec.Struct, frozen=True, kw_only=True):
    """One attempt: the task, its lease number and the lease's token."""

    task_id: str
    attempt: int
    lease_token: str


# -- worker → server --------------------------------------------------------------------------


class HandlerInfo(msgspec.Struct, kw_only=True):
    """A (queue, type) the worker runs; an empty ``versions`` list runs any version."""

    queue: str
    type: str
    versions: list[str] = []


class Hello(Frame, tag="hello", omit_defaults=False):  # ``held: []`` is sent, explicitly
    protocol: list[int]
    worker_id: str
    handlers: list[HandlerInfo]
    capacity: int
    held: list[Ref] = []
    sdk: str | None = None


class Credit(Frame, tag="credit"):
    n: int


class Start(Frame, tag="start"):
    id: int
    items: list[Ref]


class HeartbeatItem(Ref, frozen=True, kw_only=True, omit_defaults=True):
    """A held attempt, with its handler's latest progress when that changed since the
    previous heartbeat (a server that predates the field ignores it)."""

    progress: dict[str, Any] | None = None


class Heartbeat(Frame, tag="heartbeat"):
    id: int
    items: list[HeartbeatItem]


class ErrorInfo(msgspec.Struct, kw_only=True, omit_defaults=True):
    code: str
    message: str
    retryable: bool
    safe_to_retry: bool = False
    details: dict[str, Any] | None = None


class ResultItem(msgspec.Struct, kw_only=True, omit_defaults=True):
    task_id: str
    attempt: int
    lease_token: str
    outcome: Outcome
    result: Any = None
    error: ErrorInfo | None = None


class Result(Frame, tag="result"):
    id: int
    items: list[ResultItem]


class Release(Frame, tag="release"):
    id: int
    items: list[Ref]


WorkerFrame: TypeAlias = Hello | Credit | Start | Heartbeat | Result | Release


# -- server → worker --------------------------------------------------------------------------


class HeldVerdict(msgspec.Struct, kw_only=True):
    task_id: str
    attempt: int
    verdict: Literal["continue", "stop"]


class Welcome(Frame, tag="welcome"):
    protocol: int
    session_id: str
    node: str
    lease_ms: int
    heartbeat_ms: int
    max_frame_bytes: int
    held: list[HeldVerdict] = []


class WorkflowStep(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The workflow step a delivered task runs for."""

    id: str
    definition: str
    version: str
    step: str
    key: str
    round: int | None = None
    item: int | None = None


class Delivery(msgspec.Struct, kw_only=True):
    """One delivered attempt and what to run."""

    task_id: str
    attempt: int
    lease_token: str
    lease_expires_at: datetime
    queue: str
    type: str
    params: Any = None
    handler_version: str | None = None
    side_effect: SideEffect = "idempotent"
    timeout_ms: int | None = None
    attempts: int = 0
    max_attempts: int | None = None
    labels: dict[str, str] = {}
    traceparent: str | None = None
    eager_start: bool = False  # may run once its start request is sent (see docs/protocol.md)
    workflow: WorkflowStep | None = None  # the step it runs for; absent for a plain task

    @property
    def ref(self) -> Ref:
        return Ref(task_id=self.task_id, attempt=self.attempt, lease_token=self.lease_token)


class Tasks(Frame, tag="tasks"):
    items: list[Delivery]


class StartAnswer(msgspec.Struct, kw_only=True, omit_defaults=True):
    task_id: str
    attempt: int
    verdict: Literal["started", "denied", "stale"]
    lease_expires_at: datetime | None = None
    deadline_at: datetime | None = None


class Started(Frame, tag="started"):
    re: int
    items: list[StartAnswer]


class RenewAnswer(msgspec.Struct, kw_only=True, omit_defaults=True):
    task_id: str
    attempt: int
    verdict: Literal["renewed", "cancel_requested", "stale"]
    lease_expires_at: datetime | None = None


class Renewed(Frame, tag="renewed"):
    re: int
    items: list[RenewAnswer]


class AckItem(msgspec.Struct, kw_only=True):
    task_id: str
    attempt: int
    verdict: Literal["accepted", "already", "stale"]


class Acked(Frame, tag="acked"):
    re: int
    items: list[AckItem]


class ReleasedItem(msgspec.Struct, kw_only=True):
    task_id: str
    attempt: int
    released: bool


class Released(Frame, tag="released"):
    re: int
    items: list[ReleasedItem]


class CancelItem(msgspec.Struct, kw_only=True, omit_defaults=True):
    task_id: str
    attempt: int
    reason: str | None = None


class Cancel(Frame, tag="cancel"):
    items: list[CancelItem]


class Drain(Frame, tag="drain"):
    grace_ms: int


class Error(Frame, tag="error"):
    code: str
    message: str = ""
    re: int | None = None
    retry_after_ms: int | None = None


ServerFrame: TypeAlias = (
    Welcome | Tasks | Started | Renewed | Acked | Released | Cancel | Drain | Error
)

_server_decoder: Final = msgspec.json.Decoder(ServerFrame)
_worker_decoder: Final = msgspec.json.Decoder(WorkerFrame)
_encoder: Final = msgspec.json.Encoder()


def decode_server_frame(data: str | bytes) -> ServerFrame:
    """One frame from the server; raises ``msgspec.DecodeError`` (or its subclass
    ``msgspec.ValidationError``) when it is not a frame this version knows."""
    return _server_decoder.decode(data)


def decode_worker_frame(data: str | bytes) -> WorkerFrame:
    """One frame a worker sends (for tests and tools that play the server's side)."""
    return _worker_decoder.decode(data)


def encode_frame(frame: Frame) -> bytes:
    """The JSON of one frame, in either direction."""
    return _encoder.encode(frame)


def encoded_size(value: Any) -> int:
    """The size in bytes of a value's JSON encoding (raises ``TypeError`` or
    ``msgspec.EncodeError`` when it cannot be encoded)."""
    return len(_encoder.encode(value))
